package tokenize

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// tinyJSON returns a small valid byte-level BPE tokenizer.json as a map that
// tests can mutate: the 256 byte tokens, merges for "the" and " the", a
// special and a non-special added token, Llama-3's regex, BOS template.
func tinyJSON() map[string]any {
	vocab := map[string]any{}
	for b := 0; b < 256; b++ {
		vocab[string(byteToRune[b])] = b
	}
	vocab["th"] = 256
	vocab["the"] = 257
	vocab["Ġthe"] = 258
	return map[string]any{
		"version":    "1.0",
		"truncation": nil,
		"padding":    nil,
		"added_tokens": []any{
			map[string]any{"id": 259, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
			map[string]any{"id": 260, "content": "<x>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false},
		},
		"normalizer": map[string]any{"type": "NFC"},
		"pre_tokenizer": map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": PatternLlama3}, "behavior": "Isolated", "invert": false},
			map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false},
		}},
		"post_processor": map[string]any{"type": "TemplateProcessing",
			"single":         []any{map[string]any{"SpecialToken": map[string]any{"id": "<s>", "type_id": 0}}, map[string]any{"Sequence": map[string]any{"id": "A", "type_id": 0}}},
			"pair":           []any{},
			"special_tokens": map[string]any{"<s>": map[string]any{"id": "<s>", "ids": []any{259}, "tokens": []any{"<s>"}}},
		},
		"decoder": map[string]any{"type": "ByteLevel"},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": nil, "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
			"vocab": vocab, "merges": []any{"t h", "th e", []any{"Ġ", "the"}}},
	}
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestTiny(t *testing.T) {
	tok, err := New(marshal(t, tinyJSON()))
	if err != nil {
		t.Fatal(err)
	}
	got := tok.Encode("the the<x><s>", true)
	want := []int32{259, 257, 258, 260, 259}
	if !slices.Equal(got, want) {
		t.Errorf("Encode = %v, want %v", got, want)
	}
	if s := tok.Decode(got, true); s != "the the<x>" {
		t.Errorf("Decode(skipSpecial) = %q", s)
	}
	if s := tok.Decode(got, false); s != "<s>the the<x><s>" {
		t.Errorf("Decode = %q", s)
	}
	if n := tok.VocabSize(); n != 261 {
		t.Errorf("VocabSize = %d, want 261", n)
	}
	sp := tok.Special()
	if !sp.AddBOS || sp.AddEOS || sp.BOSID != 259 || sp.BOS != "<s>" || sp.EOSID != -1 || sp.PadID != -1 {
		t.Errorf("Special = %+v", sp)
	}
}

func TestLoadErrors(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mutate   func(m map[string]any)
		raw      string
		wantErr  error
		wantPath string
	}{
		{name: "not json", raw: "{", wantErr: ErrCorrupt, wantPath: "$"},
		{name: "not an object", raw: "[]", wantErr: ErrCorrupt, wantPath: "$"},
		{name: "no model", mutate: func(m map[string]any) { delete(m, "model") }, wantErr: ErrCorrupt, wantPath: "$.model"},
		{name: "WordPiece", mutate: func(m map[string]any) { m["model"].(map[string]any)["type"] = "WordPiece" }, wantErr: ErrUnsupported, wantPath: "$.model.type"},
		{name: "dropout", mutate: func(m map[string]any) { m["model"].(map[string]any)["dropout"] = 0.1 }, wantErr: ErrUnsupported, wantPath: "$.model.dropout"},
		{name: "suffix", mutate: func(m map[string]any) { m["model"].(map[string]any)["end_of_word_suffix"] = "</w>" }, wantErr: ErrUnsupported, wantPath: "$.model.end_of_word_suffix"},
		{name: "no merges", mutate: func(m map[string]any) { delete(m["model"].(map[string]any), "merges") }, wantErr: ErrCorrupt, wantPath: "$.model.merges"},
		{name: "null merges", mutate: func(m map[string]any) { m["model"].(map[string]any)["merges"] = nil }, wantErr: ErrCorrupt, wantPath: "$.model.merges"},
		{name: "merge not in vocab", mutate: func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{"x y"} }, wantErr: ErrCorrupt, wantPath: "$.model.merges[0]"},
		{name: "merge without space", mutate: func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{"t h", "xy"} }, wantErr: ErrCorrupt, wantPath: "$.model.merges[1]"},
		{name: "merge of three", mutate: func(m map[string]any) { m["model"].(map[string]any)["merges"] = []any{[]any{"t", "h", "e"}} }, wantErr: ErrCorrupt, wantPath: "$.model.merges"},
		{name: "negative id", mutate: func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["x"] = -4 }, wantErr: ErrCorrupt, wantPath: "$.model.vocab"},
		{name: "id twice", mutate: func(m map[string]any) { m["model"].(map[string]any)["vocab"].(map[string]any)["xyz"] = 5 }, wantErr: ErrCorrupt, wantPath: "$.model.vocab"},
		{name: "unk missing", mutate: func(m map[string]any) { m["model"].(map[string]any)["unk_token"] = "<unk>" }, wantErr: ErrCorrupt, wantPath: "$.model.unk_token"},
		{name: "Lowercase", mutate: func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Lowercase"} }, wantErr: ErrUnsupported, wantPath: "$.normalizer"},
		{name: "nested normalizer", mutate: func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Sequence", "normalizers": []any{map[string]any{"type": "NFC"}, map[string]any{"type": "Strip"}}}
		}, wantErr: ErrUnsupported, wantPath: "$.normalizer.normalizers[1]"},
		{name: "no type", mutate: func(m map[string]any) { m["normalizer"] = map[string]any{} }, wantErr: ErrCorrupt, wantPath: "$.normalizer"},
		{name: "Metaspace scheme", mutate: func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "prepend_scheme": "sometimes"}
		}, wantErr: ErrUnsupported, wantPath: "$.pre_tokenizer.prepend_scheme"},
		{name: "Metaspace replacement", mutate: func(m map[string]any) {
			m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": "__"}
		}, wantErr: ErrCorrupt, wantPath: "$.pre_tokenizer.replacement"},
		{name: "Metaspace after Split", mutate: func(m map[string]any) {
			p := m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)
			p[1] = map[string]any{"type": "Metaspace"}
		}, wantErr: ErrUnsupported, wantPath: "$.pre_tokenizer.pretokenizers[1]"},
		{name: "Punctuation", mutate: func(m map[string]any) {
			p := m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)
			p[0] = map[string]any{"type": "Punctuation"}
		}, wantErr: ErrUnsupported, wantPath: "$.pre_tokenizer.pretokenizers[0]"},
		{name: "Replace regex", mutate: func(m map[string]any) {
			m["normalizer"] = map[string]any{"type": "Replace", "pattern": map[string]any{"Regex": " +"}, "content": "\u2581"}
		}, wantErr: ErrUnsupported, wantPath: "$.normalizer.pattern.Regex"},
		{name: "Prepend without prepend", mutate: func(m map[string]any) { m["normalizer"] = map[string]any{"type": "Prepend"} }, wantErr: ErrCorrupt, wantPath: "$.normalizer.prepend"},
		{name: "Metaspace decoder", mutate: func(m map[string]any) { m["decoder"] = map[string]any{"type": "Metaspace"} }, wantErr: ErrUnsupported, wantPath: "$.decoder"},
		{name: "Strip decoder", mutate: func(m map[string]any) {
			m["decoder"] = map[string]any{"type": "Sequence", "decoders": []any{map[string]any{"type": "Fuse"}, map[string]any{"type": "Strip", "content": "ab", "start": 1, "stop": 0}}}
		}, wantErr: ErrCorrupt, wantPath: "$.decoder.decoders[1].content"},
		{name: "split after ByteLevel", mutate: func(m map[string]any) {
			p := m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)
			p[0], p[1] = p[1], p[0]
		}, wantErr: ErrUnsupported, wantPath: "$.pre_tokenizer.pretokenizers[1]"},
		{name: "behavior", mutate: func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["behavior"] = "MergedWithNext"
		}, wantErr: ErrUnsupported, wantPath: "$.pre_tokenizer.pretokenizers[0].behavior"},
		{name: "bad regex", mutate: func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `(\p{Lu}`}
		}, wantErr: ErrUnsupported, wantPath: "$.pre_tokenizer.pretokenizers[0].pattern"},
		{name: "no pattern", mutate: func(m map[string]any) {
			m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{}
		}, wantErr: ErrCorrupt, wantPath: "$.pre_tokenizer.pretokenizers[0].pattern"},
		{name: "Bert post", mutate: func(m map[string]any) { m["post_processor"] = map[string]any{"type": "BertProcessing"} }, wantErr: ErrUnsupported, wantPath: "$.post_processor"},
		{name: "template pair only", mutate: func(m map[string]any) {
			m["post_processor"].(map[string]any)["single"] = []any{map[string]any{"Sequence": map[string]any{"id": "B", "type_id": 0}}}
		}, wantErr: ErrUnsupported, wantPath: "$.post_processor.single[0]"},
		{name: "template unknown special", mutate: func(m map[string]any) {
			m["post_processor"].(map[string]any)["special_tokens"] = map[string]any{}
		}, wantErr: ErrCorrupt, wantPath: "$.post_processor.single[0]"},
		{name: "template id out of range", mutate: func(m map[string]any) {
			m["post_processor"].(map[string]any)["special_tokens"].(map[string]any)["<s>"].(map[string]any)["ids"] = []any{99999}
		}, wantErr: ErrCorrupt, wantPath: "$.post_processor.single[0]"},
		{name: "WordPiece decoder", mutate: func(m map[string]any) { m["decoder"] = map[string]any{"type": "WordPiece"} }, wantErr: ErrUnsupported, wantPath: "$.decoder"},
		{name: "truncation", mutate: func(m map[string]any) { m["truncation"] = map[string]any{"max_length": 8} }, wantErr: ErrUnsupported, wantPath: "$.truncation"},
		{name: "padding", mutate: func(m map[string]any) { m["padding"] = map[string]any{} }, wantErr: ErrUnsupported, wantPath: "$.padding"},
		{name: "added id", mutate: func(m map[string]any) { m["added_tokens"].([]any)[0].(map[string]any)["id"] = -1 }, wantErr: ErrCorrupt, wantPath: "$.added_tokens"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.raw)
			if tc.mutate != nil {
				m := tinyJSON()
				tc.mutate(m)
				data = marshal(t, m)
			}
			_, err := New(data)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), ": "+tc.wantPath) {
				t.Errorf("error %q does not name %s", err, tc.wantPath)
			}
		})
	}
}

func TestLoadPaths(t *testing.T) {
	zst := filepath.Join("testdata", "synthetic", "gpt2", "tokenizer.json.zst")
	d, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dir := t.TempDir()
	plain := filepath.Join(dir, "tokenizer.json")
	raw, err := os.ReadFile(zst)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := d.DecodeAll(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(plain, dec, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": {"content": "<|eos|>"}, "pad_token": "<|bos|>", "bos_token": null}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Two zstd frames (the first header's size covers only its half), and
	// a truncated file.
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	two := enc.EncodeAll(dec[len(dec)/2:], enc.EncodeAll(dec[:len(dec)/2], nil))
	twoPath := filepath.Join(t.TempDir(), "tokenizer.json.zst")
	if err := os.WriteFile(twoPath, two, 0o644); err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "tokenizer.json.zst")
	if err := os.WriteFile(cut, raw[:len(raw)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(cut); err == nil || !strings.Contains(err.Error(), cut) {
		t.Errorf("Load(truncated .zst): err = %v", err)
	}
	var sums []string
	for _, p := range []string{zst, filepath.Dir(zst), plain, dir, twoPath} {
		tok, err := Load(p)
		if err != nil {
			t.Fatalf("Load(%s): %v", p, err)
		}
		sums = append(sums, tok.SHA256())
		if p == dir || p == plain {
			sp := tok.Special()
			if sp.EOS != "<|eos|>" || sp.EOSID != 6257 || sp.Pad != "<|bos|>" || sp.PadID != 6256 || sp.BOSID != 6256 || !sp.AddBOS || !sp.AddEOS {
				t.Errorf("Load(%s).Special() = %+v", p, sp)
			}
		}
	}
	for _, s := range sums[1:] {
		if s != sums[0] {
			t.Errorf("SHA256 differs between the forms: %v", sums)
		}
	}
	for _, p := range []string{filepath.Join(dir, "missing.json"), t.TempDir()} {
		if _, err := Load(p); err == nil {
			t.Errorf("Load(%s): no error", p)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": "<|nope|>"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "tokenizer_config.json") {
		t.Errorf("unknown eos_token: err = %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tokenizer_config.json"), []byte(`{"eos_token": `), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "tokenizer_config.json") {
		t.Errorf("config not JSON: err = %v", err)
	}
	// A config that cannot be read (a directory) is an error too.
	cfgDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfgDir, "tokenizer.json"), marshal(t, tinyJSON()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(cfgDir, "tokenizer_config.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(cfgDir); err == nil {
		t.Errorf("config is a directory: no error")
	}
}

func TestFixtureFacts(t *testing.T) {
	for _, tc := range []struct {
		model  string
		sha    string
		vocab  int
		sp     Special
		tokens map[string]int32
	}{
		{"qwen2.5", "c0382117ea329cdf097041132f6d735924b697924d6f6fc3945713e96ce87539", 151665,
			Special{EOS: "<|im_end|>", EOSID: 151645, Pad: "<|endoftext|>", PadID: 151643, BOSID: -1},
			map[string]int32{"<|endoftext|>": 151643, "<|im_start|>": 151644, "<tool_call>": 151657, "Ġthe": 279, "!": 0}},
		{"llama3.1", "79e3e522635f3171300913bb421464a87de6222182a0570b9b2ccba2a964b2b4", 128256,
			Special{BOS: "<|begin_of_text|>", BOSID: 128000, EOS: "<|eot_id|>", EOSID: 128009, PadID: -1, AddBOS: true},
			map[string]int32{"<|begin_of_text|>": 128000, "<|eom_id|>": 128008, "<|reserved_special_token_247|>": 128255, "Ġthe": 279}},
	} {
		tok := loadModel(t, tc.model)
		if tok.SHA256() != tc.sha {
			t.Errorf("%s: SHA256 %s, want %s", tc.model, tok.SHA256(), tc.sha)
		}
		if tok.VocabSize() != tc.vocab {
			t.Errorf("%s: VocabSize %d, want %d", tc.model, tok.VocabSize(), tc.vocab)
		}
		if tok.Special() != tc.sp {
			t.Errorf("%s: Special %+v, want %+v", tc.model, tok.Special(), tc.sp)
		}
		for s, id := range tc.tokens {
			if got, ok := tok.TokenID(s); !ok || got != id {
				t.Errorf("%s: TokenID(%q) = %d, %v, want %d", tc.model, s, got, ok, id)
			}
			if got, ok := tok.Token(id); !ok || got != s {
				t.Errorf("%s: Token(%d) = %q, want %q", tc.model, id, got, s)
			}
		}
		for _, s := range []string{"", "nonexistent token", " the", "<|endoftext|"} {
			if id, ok := tok.TokenID(s); ok {
				t.Errorf("%s: TokenID(%q) = %d", tc.model, s, id)
			}
		}
	}
}

// FuzzLoad feeds mutated tokenizer.json files to New: errors are fine,
// panics are not; what loads must encode and decode.
func FuzzLoad(f *testing.F) {
	base := marshal(f, tinyJSON())
	f.Add(base)
	m := tinyJSON()
	m["normalizer"] = nil
	m["pre_tokenizer"] = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "use_regex": true}
	m["added_tokens"].([]any)[1].(map[string]any)["lstrip"] = true
	m["added_tokens"].([]any)[0].(map[string]any)["normalized"] = true
	f.Add(marshal(f, m))
	m = tinyJSON()
	m["pre_tokenizer"].(map[string]any)["pretokenizers"].([]any)[0].(map[string]any)["pattern"] = map[string]any{"Regex": `\s+|\p{L}+`}
	m["model"].(map[string]any)["unk_token"] = "!"
	m["model"].(map[string]any)["ignore_merges"] = true
	f.Add(marshal(f, m))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": {"type": "ByteLevel"}}`))
	f.Add([]byte(`{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", "a"]]}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tok, err := New(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("error %v is neither ErrCorrupt nor ErrUnsupported", err)
			}
			return
		}
		for _, s := range []string{"the the<x><s>", "a\xff b  \n\n 123 ſ", ""} {
			ids := tok.Encode(s, true)
			_ = tok.Decode(ids, false)
			_ = tok.Decode(ids, true)
		}
		_ = tok.Decode([]int32{-1, 0, 1 << 30}, false)
	})
}

// TestFamilySeeds checks that FuzzLoad has a seed per tokenizer family
// (testdata/fuzz/FuzzLoad/family-*, made by testdata/make-fuzz-seeds.go) and
// that each loads, so that the fuzzer starts from every family's components.
func TestFamilySeeds(t *testing.T) {
	for _, fam := range families[len(models):] {
		raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzLoad", "family-"+fam))
		if err != nil {
			t.Fatal(err)
		}
		lit, ok := strings.CutPrefix(string(raw), "go test fuzz v1\n[]byte(")
		lit, ok2 := strings.CutSuffix(lit, ")\n")
		data, err := strconv.Unquote(lit)
		if !ok || !ok2 || err != nil {
			t.Fatalf("%s: not a go test fuzz v1 []byte file", fam)
		}
		tok, err := New([]byte(data))
		if err != nil {
			t.Fatalf("%s: %v", fam, err)
		}
		if ids := tok.Encode("Hello world 123 ça", true); len(ids) == 0 {
			t.Errorf("%s: no ids", fam)
		}
	}
}
