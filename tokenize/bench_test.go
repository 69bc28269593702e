package tokenize

import (
	"encoding/json"
	"io"
	"path/filepath"
	"testing"

	"github.com/ferryml/ferry/internal/dataset"
)

// alpacaPrompts returns the bundled Alpaca demo records formatted as the seed
// workloads do, with the model's EOS appended.
func alpacaPrompts(t testing.TB, eos string) []string {
	t.Helper()
	data, err := io.ReadAll(openMaybeCompressed(t, filepath.Join("..", "testdata", "alpaca", "alpaca_en_demo.json.zst")))
	if err != nil {
		t.Fatal(err)
	}
	var recs []dataset.Record
	if err := json.Unmarshal(data, &recs); err != nil {
		t.Fatal(err)
	}
	tmpl := dataset.Alpaca()
	out := make([]string, len(recs))
	for i := range recs {
		s, _ := tmpl.Append(nil, &recs[i], "", eos)
		out[i] = string(s)
	}
	return out
}

func benchTexts(b *testing.B, tok *Tokenizer, texts []string) {
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	var dst []int32
	for _, s := range texts { // warm the cache, as a long run would
		dst = tok.AppendEncode(dst[:0], s, true)
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	cpu0 := cpuSeconds()
	for b.Loop() {
		for _, s := range texts {
			dst = tok.AppendEncode(dst[:0], s, true)
		}
	}
	// Wall-clock MB/s suffers on a shared machine; CPU seconds do less.
	b.ReportMetric(float64(n)*float64(b.N)/1e6/(cpuSeconds()-cpu0), "MB/cpu-s")
}

func BenchmarkEncode(b *testing.B) {
	eos := map[string]string{"qwen2.5": "<|endoftext|>", "llama3.1": "<|end_of_text|>",
		"tinyllama": "</s>", "llama2": "</s>", "mistral-v0.3": "</s>", "phi3": "<|endoftext|>",
		"deepseek-r1": "<｜end▁of▁sentence｜>", "phi4": "<|im_end|>", "olmo2": "<|endoftext|>",
		"smollm2": "<|endoftext|>", "mistral-nemo": "</s>", "gpt-oss": "<|return|>"}
	for _, m := range families {
		tok := loadModel(b, m)
		b.Run("alpaca/"+m, func(b *testing.B) { benchTexts(b, tok, alpacaPrompts(b, eos[m])) })
		b.Run("corpus/"+m, func(b *testing.B) { benchTexts(b, tok, corpusTexts(b)) })
	}
}

// BenchmarkEncodeCold is one pass over the bundled Alpaca prompts with an
// empty pre-token cache each time (issue 31's "cold" figure; the 52K real
// prompts have more distinct words per byte than this 999-record sample).
func BenchmarkEncodeCold(b *testing.B) {
	eos := map[string]string{"qwen2.5": "<|endoftext|>", "llama3.1": "<|end_of_text|>"}
	for _, m := range models {
		tok := loadModel(b, m)
		texts := alpacaPrompts(b, eos[m])
		b.Run("alpaca/"+m, func(b *testing.B) {
			n, pretokens := 0, 0
			for _, s := range texts {
				n += len(s)
				pretokens += len(appendScanPieces(nil, tok.fastScan, s))
			}
			b.SetBytes(int64(n))
			var dst []int32
			var cpu float64
			for b.Loop() {
				st := newState() // an empty cache
				c0 := cpuSeconds()
				for _, s := range texts {
					dst = tok.appendEncode(dst[:0], s, true, st)
				}
				cpu += cpuSeconds() - c0
			}
			b.ReportMetric(float64(n)*float64(b.N)/1e6/cpu, "MB/cpu-s")
			// issue 31's budget is per pre-token (~5 bytes of English)
			b.ReportMetric(cpu*1e9/float64(b.N)/float64(pretokens), "cpu-ns/pretoken")
		})
	}
}

// BenchmarkNewWords is the BPE of a cold pass's new words alone: the
// distinct pre-tokens of 2 to 16 bytes of the bundled Alpaca prompts that
// are not in the word table (the words appendShort merges), each merged
// from its bytes, with an empty pair cache at each pass. In a cold pass
// over the 52K real prompts (Qwen2.5) these 40K words are 1% of the 4.2M
// pre-tokens and a fifth of the time (~21 ms of ~107): ~520 ns a word
// there, where this loop, whose tables stay in the CPU's caches, reads
// ~325 with the same words.
func BenchmarkNewWords(b *testing.B) {
	eos := map[string]string{"qwen2.5": "<|endoftext|>", "llama3.1": "<|end_of_text|>"}
	for _, m := range models {
		tok := loadModel(b, m)
		ft := tok.model.tables()
		seen := map[string]bool{}
		var words []string
		for _, s := range alpacaPrompts(b, eos[m]) {
			for _, p := range appendScanPieces(nil, tok.fastScan, s) {
				if len(p) < 2 || len(p) > 16 || seen[p] {
					continue
				}
				seen[p] = true
				a, k := keyOf(p)
				if _, ok := ft.words.find(a, k, len(p)); !ok {
					words = append(words, p)
				}
			}
		}
		b.Run(m, func(b *testing.B) {
			sc := &newState().scratch
			var dst []int32
			for b.Loop() {
				sc.pairs = pairCache{}
				for _, w := range words {
					dst = tok.model.appendMerged(dst[:0], w, sc)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(words)), "ns/word")
			b.ReportMetric(float64(len(words)), "words")
		})
	}
}
