//go:build ignore

// make-fuzz-seeds.go writes one FuzzLoad seed per tokenizer family: the
// family's tokenizer.json with every component as it is but the vocabulary
// cut to its first 300 ids and the tokens of its first 200 merges, and the
// first 8 added tokens. Run from the repository root:
//
//	go run tokenize/testdata/make-fuzz-seeds.go tinyllama llama2 ...
package main

import (
	"encoding/json"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"

	"github.com/klauspost/compress/zstd"
)

func main() {
	for _, fam := range os.Args[1:] {
		raw, err := os.ReadFile(filepath.Join("testdata", "tokenizers", fam, "tokenizer.json.zst"))
		if err != nil {
			log.Fatal(err)
		}
		d, _ := zstd.NewReader(nil)
		data, err := d.DecodeAll(raw, nil)
		if err != nil {
			log.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			log.Fatal(err)
		}
		model := m["model"].(map[string]any)
		vocab := model["vocab"].(map[string]any)
		keep := map[string]any{}
		for tok, id := range vocab {
			if id.(float64) < 300 {
				keep[tok] = id
			}
		}
		var merges []any
		for k, mg := range model["merges"].([]any) {
			var a, b string
			switch v := mg.(type) {
			case string:
				for i := 0; i < len(v); i++ {
					if v[i] == ' ' {
						a, b = v[:i], v[i+1:]
						break
					}
				}
			case []any:
				a, b = v[0].(string), v[1].(string)
			}
			if k < 200 {
				for _, tok := range []string{a, b, a + b} {
					keep[tok] = vocab[tok]
				}
			}
			_, oka := keep[a]
			_, okb := keep[b]
			_, okm := keep[a+b]
			if oka && okb && okm {
				merges = append(merges, mg)
			}
		}
		model["vocab"], model["merges"] = keep, merges
		if added, ok := m["added_tokens"].([]any); ok && len(added) > 8 {
			m["added_tokens"] = added[:8]
		}
		out, err := json.Marshal(m)
		if err != nil {
			log.Fatal(err)
		}
		path := filepath.Join("tokenize", "testdata", "fuzz", "FuzzLoad", "family-"+fam)
		body := "go test fuzz v1\n[]byte(" + strconv.Quote(string(out)) + ")\n"
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s: %d bytes, %d tokens, %d merges\n", path, len(body), len(keep), len(merges))
	}
}
