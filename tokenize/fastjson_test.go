package tokenize

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/invariants"
)

// TestDecodeFast: the fixtures take the fast path, and it decodes exactly
// what encoding/json decodes; unusual layouts fall back.
func TestDecodeFast(t *testing.T) {
	for i, model := range models {
		if invariants.Race && i > 0 {
			break // encoding/json over a whole fixture is slow under -race: one suffices
		}
		data, err := readMaybeZstd(filepath.Join(fixtures, model, "tokenizer.json.zst"))
		if err != nil {
			t.Fatal(err)
		}
		var fast, slow fileJSON
		if !decodeFast(data, &fast) {
			t.Fatalf("%s: the fast path was not taken", model)
		}
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatal(err)
		}
		slow.Model.Vocab.index() // the fast path indexes the vocab too
		if len(fast.Model.Vocab.toks) < 100000 || len(fast.Model.Merges.pairs) < 100000 {
			t.Fatalf("%s: %d tokens, %d merges", model, len(fast.Model.Vocab.toks), len(fast.Model.Merges.pairs))
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Errorf("%s: the fast and the slow decode differ", model)
		}
	}
	const ok = `{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "x": [1, {"y": "\"}"}]}`
	var f fileJSON
	if !decodeFast([]byte(ok), &f) || len(f.Model.Vocab.toks) != 3 || len(f.Model.Merges.pairs) != 1 {
		t.Errorf("plain document: %+v", f.Model)
	}
	// Keys encoding/json matches case-blind: decoded alike either way.
	for _, doc := range []string{
		strings.Replace(ok, `"model"`, `"Model"`, 1),
		strings.Replace(ok, `"merges"`, `"mergeſ"`, 1),
	} {
		checkDecodeFast(t, doc)
	}
	// Twice the same key (case-blind), null tables, escapes in keys, bad
	// JSON: the slow path decides.
	for _, doc := range []string{
		strings.Replace(ok, `"x"`, `"MODEL"`, 1),
		strings.Replace(ok, `"merges"`, `"vocab": {}, "merges"`, 1),
		strings.Replace(ok, `["a b"]`, `null`, 1),
		strings.Replace(ok, `"type"`, `"ty\u0070e"`, 1),
		strings.Replace(ok, `["a b"]`, `["a b",]`, 1),
		strings.Replace(ok, `"vocab": {"a": 0`, `"vocab": {"a": 0,`, 1),
		ok + ` x`,
		`[]`,
	} {
		var f fileJSON
		if decodeFast([]byte(doc), &f) {
			t.Errorf("fast path taken for %s", doc)
		}
	}
}

// checkDecodeFast fails when the fast path decodes doc and encoding/json
// fails or decodes something else.
func checkDecodeFast(t *testing.T, doc string) {
	t.Helper()
	var fast, slow fileJSON
	if !decodeFast([]byte(doc), &fast) {
		return
	}
	if err := json.Unmarshal([]byte(doc), &slow); err != nil {
		t.Fatalf("fast path decoded %q, encoding/json: %v", doc, err)
	}
	if slow.Model != nil && slow.Model.Vocab != nil {
		slow.Model.Vocab.index() // the fast path indexes the vocab too
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("%q: fast %+v, slow %+v", doc, fast, slow)
	}
}

// FuzzDecodeFast: whenever the fast path decodes, encoding/json decodes the
// same document without error and to the same value.
func FuzzDecodeFast(f *testing.F) {
	f.Add(`{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "x": [1, {"y": "\"}"}]}`)
	f.Add(`{"added_tokens": [{"id": 3, "content": "<s>"}], "model": {"merges": [["a", "b"]], "vocab": {"a\u0020": 0}}}`)
	f.Add(`{"model": {"vocab": {"a": 1}, "merges": []}, "model": null}`)
	f.Add(`{"model": {"vocab": {"\u0061": 1, "a": 2}, "merges": ["a a"], "VOCAB": {}}}`)
	f.Fuzz(checkDecodeFast)
}

// TestVocabRepeatedKey: a token twice in the vocab takes its last id, as
// serde does, in both decode paths.
func TestVocabRepeatedKey(t *testing.T) {
	for i, doc := range []string{
		`{"added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		  "post_processor": null, "decoder": {"type": "ByteLevel"},
		  "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "a": 2, "ab": 3}, "merges": ["a b"]}}`,
		// An escape in a key: the slow path.
		`{"added_tokens": [], "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
		  "post_processor": null, "decoder": {"type": "ByteLevel"},
		  "model": {"type": "BPE", "vo\u0063ab": {"a": 0, "b": 1, "a": 2, "ab": 3}, "merges": ["a b"]}}`,
	} {
		var f fileJSON
		if fast := decodeFast([]byte(doc), &f); fast != (i == 0) {
			t.Errorf("doc %d: fast path %v", i, fast)
		}
		tok, err := New([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := tok.TokenID("a"); !ok || id != 2 {
			t.Errorf("TokenID(a) = %d, %v, want 2", id, ok)
		}
		if got := tok.Encode("aba", false); !slices.Equal(got, []int32{3, 2}) {
			t.Errorf("Encode(aba) = %v, want [3 2]", got)
		}
		if _, ok := tok.Token(0); ok {
			t.Errorf("id 0 (the first, overridden id of a) is a token")
		}
	}
}
