package tokenize

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// The model's vocab (150,000+ entries) and merges (280,000+) are most of a
// tokenizer.json; encoding/json's reflection makes them slow to load, so
// they are scanned by hand. Strings with escapes go through encoding/json.

// vocabJSON is the "vocab" object: token -> id, in file order.
type vocabJSON struct {
	toks []string
	ids  []int32
}

// mergesJSON is the "merges" array: "a b" strings or ["a", "b"] pairs.
type mergesJSON struct {
	pairs [][2]string
	bad   int // index of the first malformed merge string, or -1
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
	v.toks, v.ids = nil, nil
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
		id, err := strconv.ParseInt(ds[i:j], 10, 32)
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
	m.pairs, m.bad = nil, -1
	if string(d) == "null" {
		return nil
	}
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
			if m.bad < 0 {
				m.bad = len(m.pairs)
			}
			m.pairs = append(m.pairs, [2]string{s, ""})
			return i, nil
		}
		m.pairs = append(m.pairs, [2]string{s[:sp], s[sp+1:]})
		return i, nil
	}))
}
