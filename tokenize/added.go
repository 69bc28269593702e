package tokenize

import (
	"maps"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// addedToken is an entry of "added_tokens" in tokenizer.json.
type addedToken struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// trie finds added tokens in text with leftmost-longest semantics, as the
// Aho-Corasick automaton of HF tokenizers (MatchKind::LeftmostLongest).
type trie struct {
	first [256]bool // bytes that start some token
	// The edges of node n are edgeByte[edgeEnd[n]:edgeEnd[n+1]], to the
	// nodes edgeNode[...], sorted by byte.
	edgeEnd  []int32
	edgeByte []byte
	edgeNode []int32
	term     []int32       // node -> index into toks, -1 when no token ends here
	toks     []*addedToken // the tokens
	// A node with one edge leads down a chain of such nodes to chainEnd
	// (-1 for any other node): the first node with no edge, several, or a
	// token ending there. The chain's bytes are paths[via[end]][depth[node]:
	// depth[end]], compared at once: most of a token's bytes are on such a
	// chain (the "ndoftext|>" of Qwen2.5's "<|endoftext|>", past "<|e").
	chainEnd, depth, via []int32
	paths                []string // the contents the nodes were made from
	lead                 string   // the bytes all tokens start with: candidates are skipped to with Index
	content              []string // the tokens' contents, in toks order
	// With a few tokens, their contents are compared directly: faster
	// than walking the trie when candidates are frequent (Llama-2's "▁<s>"
	// starts where every word does).
	few bool
}

// fewTokens is the most tokens compared one by one instead of through the trie.
const fewTokens = 4

func newTrie(toks []*addedToken, content func(*addedToken) string) *trie {
	t := &trie{term: []int32{-1}, depth: []int32{0}, via: []int32{0}}
	next := map[uint64]int32{} // node<<8|byte -> child node
	for _, tok := range toks {
		s := content(tok)
		if s == "" {
			continue
		}
		t.first[s[0]] = true
		node := int32(0)
		for i := 0; i < len(s); i++ {
			k := uint64(node)<<8 | uint64(s[i])
			child, ok := next[k]
			if !ok {
				child = int32(len(t.term))
				t.term = append(t.term, -1)
				t.depth = append(t.depth, int32(i+1))
				t.via = append(t.via, int32(len(t.paths)))
				next[k] = child
			}
			node = child
		}
		t.paths = append(t.paths, s)
		if t.term[node] < 0 { // the first of equal contents wins
			t.term[node] = int32(len(t.toks))
			t.toks = append(t.toks, tok)
			t.content = append(t.content, s)
		}
	}
	for k, c := range t.content {
		if k == 0 {
			t.lead = c
			continue
		}
		n := 0
		for n < len(t.lead) && n < len(c) && t.lead[n] == c[n] {
			n++
		}
		t.lead = t.lead[:n]
	}
	t.few = len(t.content) <= fewTokens
	keys := slices.Sorted(maps.Keys(next)) // by node, then byte
	t.edgeEnd = make([]int32, len(t.term)+1)
	for _, k := range keys {
		t.edgeEnd[k>>8+1]++
		t.edgeByte = append(t.edgeByte, byte(k))
		t.edgeNode = append(t.edgeNode, next[k])
	}
	for n := range len(t.term) {
		t.edgeEnd[n+1] += t.edgeEnd[n]
	}
	// Children are made after their parents: each chain is known before
	// its parent's.
	t.chainEnd = make([]int32, len(t.term))
	for n := len(t.term) - 1; n >= 0; n-- {
		t.chainEnd[n] = -1
		if t.edgeEnd[n+1]-t.edgeEnd[n] != 1 {
			continue
		}
		c := t.edgeNode[t.edgeEnd[n]]
		if t.term[c] < 0 && t.chainEnd[c] >= 0 {
			c = t.chainEnd[c]
		}
		t.chainEnd[n] = c
	}
	return t
}

func (t *trie) empty() bool { return len(t.toks) == 0 }

// longest returns the longest token that starts s, or nil. memo (the
// caller's, one per trie; 0 at first) is 1 + the index of a token that no
// other token extends, found before: a text's added tokens are most often
// the same one (the EOS each prompt ends with), and when such a token
// starts s no other can be longer, so it is tried before the walk.
func (t *trie) longest(s string, memo *int32) (*addedToken, int) {
	if t.few {
		var best *addedToken
		bestLen := 0
		for k, c := range t.content {
			if len(c) > bestLen && strings.HasPrefix(s, c) {
				best, bestLen = t.toks[k], len(c)
			}
		}
		return best, bestLen
	}
	if k := *memo - 1; k >= 0 && strings.HasPrefix(s, t.content[k]) {
		return t.toks[k], len(t.content[k])
	}
	node, bestNode := int32(0), int32(0)
	var best *addedToken
	bestLen := 0
	for i := 0; i < len(s); {
		if end := t.chainEnd[node]; end >= 0 {
			chain := t.paths[t.via[end]][t.depth[node]:t.depth[end]]
			if !strings.HasPrefix(s[i:], chain) {
				break // no token ends inside a chain
			}
			node, i = end, i+len(chain)
		} else {
			c, next := s[i], int32(-1)
			for j := t.edgeEnd[node]; j < t.edgeEnd[node+1]; j++ {
				if t.edgeByte[j] == c {
					next = t.edgeNode[j]
					break
				}
			}
			if next < 0 {
				break
			}
			node, i = next, i+1
		}
		if k := t.term[node]; k >= 0 {
			best, bestLen, bestNode = t.toks[k], i, node
		}
	}
	// A token at a node with no edges is extended by none.
	if best != nil && t.edgeEnd[bestNode] == t.edgeEnd[bestNode+1] {
		*memo = t.term[bestNode] + 1
	}
	return best, bestLen
}

// nextCandidate returns the first index >= i where a token may start, or len(s).
func (t *trie) nextCandidate(s string, i int) int {
	if t.lead != "" {
		// Llama-2's normalized tokens share "▁<": its last byte is rare
		// in text, where "▁" starts every word, so IndexByte skips to it.
		k := len(t.lead) - 1
		for j := i + k; j < len(s); j++ {
			o := strings.IndexByte(s[j:], t.lead[k])
			if o < 0 {
				break
			}
			j += o
			if strings.HasPrefix(s[j-k:], t.lead) {
				return j - k
			}
		}
		return len(s)
	}
	for j := i; j < len(s); j++ {
		if t.first[s[j]] {
			return j
		}
	}
	return len(s)
}

// match is a found added token: s[start:end], lstrip/rstrip included.
type match struct {
	tok        *addedToken
	start, end int
}

// find returns the next match in s at or after from, with HF's rules:
// leftmost-longest non-overlapping matches, then single_word matches that are
// not whole words are dropped, lstrip takes the white space before the match
// (not before prev, the end of the previous match) and rstrip the white space
// after it. memo is longest's.
func (t *trie) find(s string, from, prev int, memo *int32) (match, bool) {
	i := from
	for {
		i = t.nextCandidate(s, i)
		if i >= len(s) {
			return match{}, false
		}
		tok, n := t.longest(s[i:], memo)
		if tok == nil {
			i++
			continue
		}
		start, end := i, i+n
		if tok.SingleWord {
			startOK := start == 0 || !endsWithWord(s[:start])
			endOK := end == len(s) || !startsWithWord(s[end:])
			if !startOK || !endOK {
				i = end // the automaton moves past a discarded match
				continue
			}
		}
		if tok.LStrip {
			j := start
			for j > 0 {
				r, w := utf8.DecodeLastRuneInString(s[:j])
				if !unicode.IsSpace(r) {
					break
				}
				j -= w
			}
			start = max(j, prev)
		}
		if tok.RStrip {
			for end < len(s) {
				r, w := utf8.DecodeRuneInString(s[end:])
				if !unicode.IsSpace(r) {
					break
				}
				end += w
			}
		}
		return match{tok, start, end}, true
	}
}

func isWordRune(r rune) bool {
	return r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Nl, r) || unicode.Is(unicode.No, r) || unicode.Is(unicode.M, r) || unicode.Is(unicode.Pc, r)
}

func endsWithWord(s string) bool {
	r, _ := utf8.DecodeLastRuneInString(s)
	return isWordRune(r)
}

func startsWithWord(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return isWordRune(r)
}
