package tokenize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// The model's vocab (150,000+ entries) and merges (280,000+) are most of a
// tokenizer.json; encoding/json's reflection makes them slow to load, so
// they are scanned by hand. Strings with escapes go through encoding/json.
// Load finds both tables in one structural walk (splitModelTables) and
// parses them in parallel while encoding/json decodes the rest of the
// document with the tables replaced by null, so the megabytes of the tables
// are not validated and skipped by encoding/json first; any unusual layout
// falls back to encoding/json over the whole document (FuzzDecodeFast
// holds the two to the same result).

// vocabJSON is the "vocab" object: token -> id, in file order.
type vocabJSON struct {
	toks []string
	ids  []int32
	m    map[string]int32 // token -> id (the last of a repeated key), when built
}

// index builds v.m.
func (v *vocabJSON) index() {
	v.m = make(map[string]int32, len(v.toks))
	for k, tok := range v.toks {
		v.m[tok] = v.ids[k] // a repeated key: the last wins, as in serde
	}
}

// mergesJSON is the "merges" array: "a b" strings or ["a", "b"] pairs.
type mergesJSON struct {
	pairs   [][2]string
	bad     int  // 1 + the index of the first malformed merge string; 0: none
	present bool // an array was decoded (HF refuses a BPE model without one)
}

func skipWS(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\n' || d[i] == '\r' || d[i] == '\t') {
		i++
	}
	return i
}

// jsonString reads the JSON string starting at d[i] (a quote); ds is
// string(d), converted once by the caller, so a string without escapes is a
// substring of it and costs no allocation.
func jsonString(d []byte, ds string, i int) (string, int, error) {
	if i >= len(d) || d[i] != '"' {
		return "", i, fmt.Errorf("byte %d of the value: want a string", i)
	}
	esc := false
	for j := i + 1; j < len(d); j++ {
		switch c := d[j]; {
		case c == '\\':
			esc = true
			j++
		case c == '"':
			if !esc {
				return ds[i+1 : j], j + 1, nil
			}
			var s string
			if err := json.Unmarshal(d[i:j+1], &s); err != nil {
				return "", i, fmt.Errorf("byte %d: %v", i, err)
			}
			return s, j + 1, nil
		case c < 0x20:
			return "", i, fmt.Errorf("byte %d: control character in string", j)
		}
	}
	return "", i, fmt.Errorf("byte %d: unterminated string", i)
}

func expect(d []byte, i int, c byte) (int, error) {
	i = skipWS(d, i)
	if i >= len(d) || d[i] != c {
		return i, fmt.Errorf("byte %d: want %q", i, c)
	}
	return i + 1, nil
}

// list calls elem for each element of the JSON array or object at d[i]
// (open is '[' or '{'), which must consume one element and return the index after it.
func list(d []byte, open, close byte, elem func(i int) (int, error)) error {
	i, err := expect(d, 0, open)
	if err != nil {
		return err
	}
	i = skipWS(d, i)
	if i < len(d) && d[i] == close {
		i++
	} else {
		for {
			if i, err = elem(skipWS(d, i)); err != nil {
				return err
			}
			i = skipWS(d, i)
			if i < len(d) && d[i] == ',' {
				i++
				continue
			}
			if i, err = expect(d, i, close); err != nil {
				return err
			}
			break
		}
	}
	if i = skipWS(d, i); i != len(d) {
		return fmt.Errorf("byte %d: trailing data", i)
	}
	return nil
}

// pathError is a parse error at a JSON path.
type pathError struct {
	path string
	err  error
}

func (e *pathError) Error() string { return e.path + ": " + e.err.Error() }

func (v *vocabJSON) UnmarshalJSON(d []byte) error {
	v.toks, v.ids, v.m = nil, nil, nil
	if string(d) == "null" {
		return nil
	}
	// Every entry has at least two quotes: size the slices once.
	n := bytes.Count(d, []byte{'"'}) / 2
	v.toks, v.ids = make([]string, 0, n), make([]int32, 0, n)
	ds := string(d)
	return wrapPath("$.model.vocab", list(d, '{', '}', func(i int) (int, error) {
		tok, i, err := jsonString(d, ds, i)
		if err != nil {
			return i, err
		}
		if i, err = expect(d, i, ':'); err != nil {
			return i, err
		}
		i = skipWS(d, i)
		j := i
		for j < len(d) && (d[j] == '-' || (d[j] >= '0' && d[j] <= '9')) {
			j++
		}
		num := ds[i:j]
		id, err := strconv.ParseInt(num, 10, 32)
		if digits := strings.TrimPrefix(num, "-"); len(digits) > 1 && digits[0] == '0' {
			err = strconv.ErrSyntax // JSON has no leading zeros
		}
		if err != nil {
			return i, fmt.Errorf("byte %d: token %q: id is not an integer", i, tok)
		}
		v.toks = append(v.toks, tok)
		v.ids = append(v.ids, int32(id))
		return j, nil
	}))
}

func wrapPath(path string, err error) error {
	if err == nil {
		return nil
	}
	return &pathError{path, err}
}

func (m *mergesJSON) UnmarshalJSON(d []byte) error {
	m.pairs, m.bad, m.present = nil, 0, false
	if string(d) == "null" {
		return nil
	}
	m.present = true
	// Every merge has at least two quotes: size the slice once.
	m.pairs = make([][2]string, 0, bytes.Count(d, []byte{'"'})/2)
	ds := string(d)
	return wrapPath("$.model.merges", list(d, '[', ']', func(i int) (int, error) {
		if i < len(d) && d[i] == '[' {
			a, i, err := jsonString(d, ds, skipWS(d, i+1))
			if err != nil {
				return i, err
			}
			if i, err = expect(d, i, ','); err != nil {
				return i, err
			}
			b, i, err := jsonString(d, ds, skipWS(d, i))
			if err != nil {
				return i, err
			}
			if i, err = expect(d, i, ']'); err != nil {
				return i, fmt.Errorf("%v (a merge pair has two strings)", err)
			}
			m.pairs = append(m.pairs, [2]string{a, b})
			return i, nil
		}
		s, i, err := jsonString(d, ds, i)
		if err != nil {
			return i, err
		}
		sp := -1
		for k := 0; k < len(s); k++ {
			if s[k] == ' ' {
				if sp >= 0 {
					sp = -2
					break
				}
				sp = k
			}
		}
		if sp < 0 {
			if m.bad == 0 {
				m.bad = len(m.pairs) + 1
			}
			m.pairs = append(m.pairs, [2]string{s, ""})
			return i, nil
		}
		m.pairs = append(m.pairs, [2]string{s[:sp], s[sp+1:]})
		return i, nil
	}))
}

// skipValue returns the index after the JSON value starting at d[i] (after
// white space), or -1 where it is not well formed enough to skip. It checks
// only structure; encoding/json or the hand parsers judge the rest.
func skipValue(d []byte, i int) int {
	i = skipWS(d, i)
	if i >= len(d) {
		return -1
	}
	switch d[i] {
	case '"':
		return skipString(d, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(d); j++ {
			switch d[j] {
			case '"':
				if j = skipString(d, j); j < 0 {
					return -1
				}
				j--
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for j < len(d) && (d[j] >= 'a' && d[j] <= 'z' || d[j] >= '0' && d[j] <= '9' || d[j] == '-' || d[j] == '+' || d[j] == '.' || d[j] == 'E') {
		j++ // a number, true, false or null (encoding/json checks which)
	}
	if j == i {
		return -1
	}
	return j
}

// skipString returns the index after the JSON string whose opening quote is
// d[i], or -1 when it is not closed.
func skipString(d []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(d[j:], '"')
		if k < 0 {
			return -1
		}
		j += k
		n := 0 // backslashes right before the quote: odd escapes it
		for b := j - 1; b > i && d[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
		j++
	}
}

// jsonSpan is d[lo:hi], a value inside a document.
type jsonSpan struct{ lo, hi int }

// objectMembers walks the object at d[i]: for each member, value(key, lo)
// returns the index after the value starting at lo, or -1. It returns the
// index after the object, or -1 where the object is not plain (a key with an
// escape, or a structure it cannot follow).
func objectMembers(d []byte, i int, value func(key string, lo int) int) int {
	i = skipWS(d, i)
	if i >= len(d) || d[i] != '{' {
		return -1
	}
	i = skipWS(d, i+1)
	if i < len(d) && d[i] == '}' {
		return i + 1
	}
	for {
		if i >= len(d) || d[i] != '"' {
			return -1
		}
		k := i + 1
		for k < len(d) && d[k] != '"' && d[k] != '\\' {
			k++
		}
		if k >= len(d) || d[k] != '"' {
			return -1
		}
		key := string(d[i+1 : k])
		j := skipWS(d, k+1)
		if j >= len(d) || d[j] != ':' {
			return -1
		}
		hi := value(key, skipWS(d, j+1))
		if hi < 0 {
			return -1
		}
		i = skipWS(d, hi)
		if i < len(d) && d[i] == ',' {
			i = skipWS(d, i+1)
			continue
		}
		if i < len(d) && d[i] == '}' {
			return i + 1
		}
		return -1
	}
}

// splitModelTables finds the "vocab" and "merges" values of the top-level
// "model" object, the bulk of a tokenizer.json, so they can be parsed by
// hand and encoding/json decodes (and validates) only the rest: the
// document with both values replaced by null. ok is false where the layout
// is not the plain one (a key that encoding/json would match case-blind
// twice, escapes in keys, either table missing or not found in one walk):
// then the caller decodes the whole document the slow way.
func splitModelTables(d []byte) (rest []byte, vocab, merges jsonSpan, ok bool) {
	nModel, nv, nm := 0, 0, 0
	modelValue := func(key string, lo int) int {
		hi := skipValue(d, lo)
		switch {
		case strings.EqualFold(key, "vocab"):
			vocab = jsonSpan{lo, hi}
			nv++
		case strings.EqualFold(key, "merges"):
			merges = jsonSpan{lo, hi}
			nm++
		}
		return hi
	}
	end := objectMembers(d, 0, func(key string, lo int) int {
		if !strings.EqualFold(key, "model") {
			return skipValue(d, lo)
		}
		nModel++
		return objectMembers(d, lo, modelValue)
	})
	if end < 0 || skipWS(d, end) != len(d) || nModel != 1 || nv != 1 || nm != 1 {
		return nil, jsonSpan{}, jsonSpan{}, false
	}
	first, second := vocab, merges
	if first.lo > second.lo {
		first, second = second, first
	}
	rest = make([]byte, 0, len(d)-(vocab.hi-vocab.lo)-(merges.hi-merges.lo)+8)
	rest = append(rest, d[:first.lo]...)
	rest = append(rest, "null"...)
	rest = append(rest, d[first.hi:second.lo]...)
	rest = append(rest, "null"...)
	rest = append(rest, d[second.hi:]...)
	return rest, vocab, merges, true
}
