package tokenize

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// spJSON is a tiny SentencePiece-style tokenizer.json: Prepend + Replace,
// no pre-tokenizer, byte fallback for é only (C3 A9; ü's BC is missing),
// the Llama decoder chain.
func spJSON(fuseUnk, byteFallback bool) map[string]any {
	return map[string]any{
		"version": "1.0", "truncation": nil, "padding": nil,
		"added_tokens": []any{map[string]any{"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}},
		"normalizer": map[string]any{"type": "Sequence", "normalizers": []any{
			map[string]any{"type": "Prepend", "prepend": "▁"},
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": " "}, "content": "▁"},
		}},
		"pre_tokenizer": nil, "post_processor": nil,
		"decoder": map[string]any{"type": "Sequence", "decoders": []any{
			map[string]any{"type": "Replace", "pattern": map[string]any{"String": "▁"}, "content": " "},
			map[string]any{"type": "ByteFallback"},
			map[string]any{"type": "Fuse"},
			map[string]any{"type": "Strip", "content": " ", "start": 1, "stop": 0},
		}},
		"model": map[string]any{"type": "BPE", "dropout": nil, "unk_token": "<unk>", "continuing_subword_prefix": nil,
			"end_of_word_suffix": nil, "fuse_unk": fuseUnk, "byte_fallback": byteFallback,
			"vocab":  map[string]any{"<unk>": 0, "▁": 1, "a": 2, "b": 3, "ab": 4, "<0xC3>": 5, "<0xA9>": 6, "▁ab": 7},
			"merges": []any{"a b", "▁ ab"}},
	}
}

// TestUnkByteFallback checks unk, fuse_unk and byte_fallback against the ids
// and decode (skip_special_tokens=True) HF tokenizers 0.23.3 gives for
// spJSON: a character whose bytes are not all <0xNN> tokens is unk; a
// pending unk is written after the byte tokens of the next character, as
// HF's merge_word does.
func TestUnkByteFallback(t *testing.T) {
	for _, tc := range []struct {
		fuse, fb bool
		in       string
		want     []int32
		decoded  string
	}{
		{true, true, "ab é ü ΩΩ a", []int32{7, 1, 5, 6, 1, 0, 1, 0, 1, 2}, "ab é   a"},
		{true, true, "üé", []int32{1, 5, 6, 0}, "é"},
		{true, true, "ΩéΩ", []int32{1, 5, 6, 0}, "é"},
		{true, true, "x", []int32{1, 0}, ""},
		{true, false, "ab é ü ΩΩ a", []int32{7, 1, 0, 1, 0, 1, 0, 1, 2}, "ab    a"},
		{true, false, "üé", []int32{1, 0}, ""},
		{false, true, "ab é ü ΩΩ a", []int32{7, 1, 5, 6, 1, 0, 1, 0, 0, 1, 2}, "ab é   a"},
		{false, true, "üé", []int32{1, 5, 6, 0}, "é"},
		{false, true, "ΩéΩ", []int32{1, 5, 6, 0, 0}, "é"},
		{false, false, "ab é ü ΩΩ a", []int32{7, 1, 0, 1, 0, 1, 0, 0, 1, 2}, "ab    a"},
		{false, false, "ΩéΩ", []int32{1, 0, 0, 0}, ""},
	} {
		t.Run(fmt.Sprintf("fuse=%v/fallback=%v/%s", tc.fuse, tc.fb, tc.in), func(t *testing.T) {
			tok, err := New(marshal(t, spJSON(tc.fuse, tc.fb)))
			if err != nil {
				t.Fatal(err)
			}
			got := tok.Encode(tc.in, true)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Encode = %v, want %v", got, tc.want)
			}
			if s := tok.Decode(tc.want, true); s != tc.decoded {
				t.Errorf("Decode = %q, want %q", s, tc.decoded)
			}
		})
	}
}

// TestMetaspace checks Metaspace's prepend_scheme (always, first, never, and
// the legacy add_prefix_space) with split true and false against the ids HF
// tokenizers 0.23.3 gives. The vocabulary has "b▁", so words are not cut
// before "▁" runs (symCut is false): the other path than the real files'.
func TestMetaspace(t *testing.T) {
	mk := func(pre map[string]any) map[string]any {
		m := spJSON(true, false)
		m["normalizer"], m["pre_tokenizer"], m["decoder"] = nil, pre, nil
		m["added_tokens"] = append(m["added_tokens"].([]any), map[string]any{"id": 9, "content": "<x>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": false})
		model := m["model"].(map[string]any)
		model["vocab"] = map[string]any{"<unk>": 0, "▁": 1, "a": 2, "b": 3, "ab": 4, "▁ab": 5, "▁▁": 6, "b▁": 7, "<x>": 9}
		model["merges"] = []any{"a b", "▁ ab", "▁ ▁", "b ▁"}
		return m
	}
	want := map[string][3][]int32{ // "ab  ab", " ab<x>ab", "ab b ab"
		"always": {{5, 1, 5}, {5, 9, 5}, {5, 1, 3, 5}},
		"first":  {{5, 1, 5}, {5, 9, 4}, {5, 1, 3, 5}},
		"never":  {{4, 1, 5}, {5, 9, 4}, {4, 1, 3, 5}},
	}
	for _, scheme := range []string{"always", "first", "never", "legacy"} {
		for _, split := range []bool{true, false} {
			pre := map[string]any{"type": "Metaspace", "replacement": "▁", "prepend_scheme": scheme, "split": split}
			w := want[scheme]
			if scheme == "legacy" {
				pre = map[string]any{"type": "Metaspace", "replacement": "▁", "add_prefix_space": true}
				w = want["always"]
			}
			tok, err := New(marshal(t, mk(pre)))
			if err != nil {
				t.Fatal(err)
			}
			if tok.model.symCut {
				t.Fatal("symCut with b▁ in the vocabulary")
			}
			for i, in := range []string{"ab  ab", " ab<x>ab", "ab b ab"} {
				if got := tok.Encode(in, false); !slices.Equal(got, w[i]) {
					t.Errorf("%s split=%v %q: %v, want %v", scheme, split, in, got, w[i])
				}
			}
		}
	}
}

// TestIndexSym: indexSym is strings.Index(s, sym), also where s holds
// other characters that start with sym's first byte.
func TestIndexSym(t *testing.T) {
	parts := []string{sym, "a", "—", "’", "\xe2", "\xe2\x96", "▂", " ", "東"}
	for n := 0; n < 5000; n++ {
		var b strings.Builder
		for k := n; k > 0; k /= len(parts) {
			b.WriteString(parts[k%len(parts)])
		}
		s := b.String()
		if got, want := indexSym(s), strings.Index(s, sym); got != want {
			t.Fatalf("indexSym(%q) = %d, want %d", s, got, want)
		}
	}
}
