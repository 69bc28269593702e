package tokenize

import (
	"strings"
	"testing"
)

// TestTrieFind checks leftmost-longest matching in the three ways the trie
// skips to candidates: the common lead of a few tokens (Llama-2's
// normalized "▁<s>" and "▁</s>" share "▁<"), one shared first byte, and
// several first bytes (the map walk), against a brute-force search.
func TestTrieFind(t *testing.T) {
	sets := [][]string{
		{"▁<s>", "▁</s>", "▁<unk>"},              // few, lead "▁<"
		{"<s>", "<|x|>", "<|xy|>", "<a>", "<b>"}, // many, one first byte
		{"ab", "abc", "b", "xyz", "q"},           // many, several first bytes
		{"aa", "aab"},                            // few, lead "aa"
	}
	texts := []string{"", "▁", "▁<", "▁<s", "a▁<s>b▁</s>▁<unk>▁<unk", "▁▁<s>▁<s>", "<|xy|><|x|<s><a><b",
		"abcabxyzxyq", "aabaaab", "aaa", strings.Repeat("▁<s▁", 10) + "▁<s>",
		"ababcababc", "<|x|><|xy|><|x|><|xy|>"} // longest's memo: a token others extend is never kept
	for _, set := range sets {
		for _, s := range texts {
			checkTrieFind(t, set, s)
		}
	}
}

// checkTrieFind holds the trie of the tokens set to a brute-force
// leftmost-longest search of s.
func checkTrieFind(t *testing.T, set []string, s string) {
	t.Helper()
	toks := make([]*addedToken, len(set))
	for i, c := range set {
		toks[i] = &addedToken{ID: int32(i), Content: c}
	}
	tr := newTrie(toks, func(a *addedToken) string { return a.Content })
	var got, want []string
	var memo int32 // kept from match to match, as a state keeps it
	for prev := 0; ; {
		m, ok := tr.find(s, prev, prev, &memo)
		if !ok {
			break
		}
		got = append(got, s[m.start:m.end])
		prev = m.end
	}
	for i := 0; i < len(s); { // leftmost, then longest
		best := ""
		for _, c := range set {
			if strings.HasPrefix(s[i:], c) && len(c) > len(best) {
				best = c
			}
		}
		if best == "" {
			i++
			continue
		}
		want = append(want, best)
		i += len(best)
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("tokens %q in %q: found %q, want %q", set, s, got, want)
	}
}

// FuzzTrieFind: the trie (its chains and edges, or the few tokens compared
// one by one) finds what a brute-force search does, for any tokens (the
// fuzz input's first line, split at spaces) in any text (the rest).
func FuzzTrieFind(f *testing.F) {
	f.Add("<|endoftext|> <|im_start|> <|im_end|> <|end|> <s> <|e\nabc<|endoftext|><|im_end|x<|end|><|e")
	f.Add("ab abc abcd b xyz q\nabcdabcabxyzq")
	f.Add("aa aab aabb aabbb aabbbb\naabbbbaabbbaab")
	f.Fuzz(func(t *testing.T, in string) {
		head, text, _ := strings.Cut(in, "\n")
		var set []string
		for _, c := range strings.Split(head, " ") {
			if c != "" && len(set) < 64 {
				set = append(set, c)
			}
		}
		if len(text) > 4096 {
			text = text[:4096]
		}
		checkTrieFind(t, set, text)
	})
}
