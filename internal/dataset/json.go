package dataset

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of values skipped inside a record.
const maxDepth = 256

// jsonScanner reads Alpaca records from a JSON array or JSON Lines held in
// memory. It reports positions as byte offsets and 1-based lines.
type jsonScanner struct {
	data []byte
	pos  int
	buf  []byte // scratch for strings with escapes
	kbuf []byte // scratch for keys
}

// syntaxError is a malformed-JSON error at a byte offset.
type syntaxError struct {
	off int
	msg string
}

func (e *syntaxError) Error() string { return e.msg }

func (s *jsonScanner) errf(off int, format string, args ...any) error {
	return &syntaxError{off: off, msg: fmt.Sprintf(format, args...)}
}

func (s *jsonScanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

func (s *jsonScanner) found() string {
	if s.pos >= len(s.data) {
		return "end of input"
	}
	c := s.data[s.pos]
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

// fieldError is a record-level problem with one field: the JSON is well
// formed, the record is not usable.
type fieldError struct {
	field string
	err   error
}

// object parses one JSON object at s.pos into rec. A syntax error makes
// the rest of the input unreadable; a field error leaves the scanner after
// the object, so the caller may skip the record.
func (s *jsonScanner) object(rec *Record) (ferr *fieldError, err error) {
	if s.pos >= len(s.data) || s.data[s.pos] != '{' {
		kind := s.kindAt()
		return nil, s.errf(s.pos, "found %s, want an object", kind)
	}
	s.pos++
	var have [3]bool
	first := true
	for {
		s.ws()
		if s.pos >= len(s.data) {
			return nil, s.errf(s.pos, "unexpected end of input inside an object")
		}
		if s.data[s.pos] == '}' {
			if !first {
				return nil, s.errf(s.pos, "trailing comma before '}'")
			}
			s.pos++
			break
		}
		if s.data[s.pos] != '"' {
			return nil, s.errf(s.pos, "found %s, want a key string", s.found())
		}
		key, err := s.str(s.kbuf[:0])
		s.kbuf = key[:0] // keep the capacity for the next key
		if err != nil {
			var fe *fieldError
			if !errors.As(err, &fe) {
				return nil, err
			}
			if ferr == nil {
				ferr = fe
			}
		}
		s.ws()
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return nil, s.errf(s.pos, "found %s after key %q, want ':'", s.found(), key)
		}
		s.pos++
		s.ws()
		idx := -1
		switch string(key) {
		case "instruction":
			idx = 0
		case "input":
			idx = 1
		case "output":
			idx = 2
		}
		if idx >= 0 {
			if s.pos < len(s.data) && s.data[s.pos] == '"' {
				v, err := s.str(s.buf[:0])
				s.buf = v[:0] // keep the capacity: sv below is a copy
				if err != nil {
					var fe *fieldError
					if errors.As(err, &fe) {
						fe.field = fieldNames[idx]
						if ferr == nil {
							ferr = fe
						}
						err = nil
					} else {
						return nil, err
					}
				}
				if err == nil {
					sv := string(v)
					switch idx {
					case 0:
						rec.Instruction = sv
					case 1:
						rec.Input = sv
					case 2:
						rec.Output = sv
					}
					have[idx] = true
				}
			} else {
				kind := s.kindAt()
				if err := s.skip(0); err != nil {
					return nil, err
				}
				if idx == 1 && kind == "null" {
					// "input": null is an absent input, as the seeds'
					// row.get("input") treats it.
					rec.Input = ""
				} else if ferr == nil {
					ferr = &fieldError{field: fieldNames[idx], err: fmt.Errorf("%w: field %q is %s, want a string", ErrField, fieldNames[idx], kind)}
				}
			}
		} else if err := s.skip(0); err != nil {
			return nil, err
		}
		first = false
		s.ws()
		if s.pos >= len(s.data) {
			return nil, s.errf(s.pos, "unexpected end of input inside an object")
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
			continue
		case '}':
			s.pos++
		default:
			return nil, s.errf(s.pos, "found %s in an object, want ',' or '}'", s.found())
		}
		break
	}
	if ferr != nil {
		return ferr, nil
	}
	for i, name := range fieldNames {
		if i != 1 && !have[i] {
			return &fieldError{field: name, err: fmt.Errorf("%w: field %q is missing", ErrField, name)}, nil
		}
	}
	return nil, nil
}

var fieldNames = [3]string{"instruction", "input", "output"}

// kindAt names the JSON value starting at s.pos.
func (s *jsonScanner) kindAt() string {
	if s.pos >= len(s.data) {
		return "end of input"
	}
	switch c := s.data[s.pos]; {
	case c == '"':
		return "a string"
	case c == '{':
		return "an object"
	case c == '[':
		return "an array"
	case c == 'n':
		return "null"
	case c == 't' || c == 'f':
		return "a boolean"
	case c == '-' || (c >= '0' && c <= '9'):
		return "a number"
	}
	return s.found()
}

// str parses a JSON string at s.pos (which is '"') and appends its decoded
// bytes to dst. Invalid UTF-8, raw control characters and unpaired
// surrogate escapes are field errors: the scanner still moves past the
// string so the record can be skipped.
func (s *jsonScanner) str(dst []byte) ([]byte, error) {
	start := s.pos
	s.pos++
	var bad error
	runStart := s.pos
	for {
		// fast path: plain ASCII without escapes
		i := s.pos
		for i < len(s.data) {
			c := s.data[i]
			if c == '"' || c == '\\' || c < 0x20 || c >= 0x80 {
				break
			}
			i++
		}
		s.pos = i
		if s.pos >= len(s.data) {
			return nil, s.errf(start, "unterminated string")
		}
		c := s.data[s.pos]
		switch {
		case c == '"':
			dst = append(dst, s.data[runStart:s.pos]...)
			s.pos++
			if bad != nil {
				return dst, bad
			}
			return dst, nil
		case c == '\\':
			dst = append(dst, s.data[runStart:s.pos]...)
			if s.pos+1 >= len(s.data) {
				return nil, s.errf(start, "unterminated string")
			}
			e := s.data[s.pos+1]
			s.pos += 2
			switch e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				r, ok := s.hex4(s.pos)
				if !ok {
					return nil, s.errf(s.pos-2, "invalid \\u escape")
				}
				s.pos += 4
				if utf16.IsSurrogate(r) {
					r2 := rune(-1)
					if s.pos+6 <= len(s.data) && s.data[s.pos] == '\\' && s.data[s.pos+1] == 'u' {
						if v, ok := s.hex4(s.pos + 2); ok {
							r2 = v
						}
					}
					if dec := utf16.DecodeRune(r, r2); r < 0xdc00 && dec != utf8.RuneError {
						s.pos += 6
						r = dec
					} else {
						if bad == nil {
							bad = &fieldError{err: fmt.Errorf("%w: unpaired surrogate \\u%04x at byte %d", ErrUTF8, r, s.pos-6)}
						}
						r = utf8.RuneError
					}
				}
				dst = utf8.AppendRune(dst, r)
			default:
				return nil, s.errf(s.pos-2, "invalid escape '\\%c' in string", e)
			}
			runStart = s.pos
		case c < 0x20:
			if bad == nil {
				bad = &fieldError{err: fmt.Errorf("%w: raw control character 0x%02x in a string at byte %d (JSON needs \\u%04x)", ErrField, c, s.pos, c)}
			}
			s.pos++
		default: // non-ASCII: validate one rune
			r, size := utf8.DecodeRune(s.data[s.pos:])
			if r == utf8.RuneError && size <= 1 {
				if bad == nil {
					bad = &fieldError{err: fmt.Errorf("%w: invalid UTF-8 byte 0x%02x at byte %d", ErrUTF8, c, s.pos)}
				}
				s.pos++
				continue
			}
			s.pos += size
		}
	}
}

func (s *jsonScanner) hex4(at int) (rune, bool) {
	if at+4 > len(s.data) {
		return 0, false
	}
	var r rune
	for _, c := range s.data[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}

// skip moves past one JSON value of any kind, checking its syntax.
func (s *jsonScanner) skip(depth int) error {
	if depth > maxDepth {
		return s.errf(s.pos, "values nested deeper than %d", maxDepth)
	}
	if s.pos >= len(s.data) {
		return s.errf(s.pos, "unexpected end of input, want a value")
	}
	switch c := s.data[s.pos]; {
	case c == '"':
		_, err := s.str(s.buf[:0])
		var fe *fieldError
		if errors.As(err, &fe) {
			return nil // an unused field: its content does not matter
		}
		return err
	case c == '{' || c == '[':
		closer := byte('}')
		if c == '[' {
			closer = ']'
		}
		open := s.pos
		s.pos++
		s.ws()
		if s.pos < len(s.data) && s.data[s.pos] == closer {
			s.pos++
			return nil
		}
		for {
			s.ws()
			if c == '{' {
				if s.pos >= len(s.data) || s.data[s.pos] != '"' {
					return s.errf(s.pos, "found %s, want a key string", s.found())
				}
				if _, err := s.str(s.buf[:0]); err != nil {
					var fe *fieldError
					if !errors.As(err, &fe) {
						return err
					}
				}
				s.ws()
				if s.pos >= len(s.data) || s.data[s.pos] != ':' {
					return s.errf(s.pos, "found %s, want ':'", s.found())
				}
				s.pos++
				s.ws()
			}
			if err := s.skip(depth + 1); err != nil {
				return err
			}
			s.ws()
			if s.pos >= len(s.data) {
				return s.errf(open, "unterminated %s", map[byte]string{'{': "object", '[': "array"}[c])
			}
			switch s.data[s.pos] {
			case ',':
				s.pos++
				s.ws()
				if s.pos < len(s.data) && s.data[s.pos] == closer {
					return s.errf(s.pos, "trailing comma before '%c'", closer)
				}
				continue
			case closer:
				s.pos++
				return nil
			default:
				return s.errf(s.pos, "found %s, want ',' or '%c'", s.found(), closer)
			}
		}
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		return s.number()
	}
	return s.errf(s.pos, "found %s, want a value", s.found())
}

func (s *jsonScanner) lit(w string) error {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(w)) {
		return s.errf(s.pos, "invalid literal, want %q", w)
	}
	s.pos += len(w)
	return nil
}

func (s *jsonScanner) number() error {
	start := s.pos
	if s.data[s.pos] == '-' {
		s.pos++
	}
	digits := func() int {
		n := 0
		for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
			s.pos++
			n++
		}
		return n
	}
	if s.pos < len(s.data) && s.data[s.pos] == '0' {
		s.pos++
	} else if digits() == 0 {
		return s.errf(start, "invalid number")
	}
	if s.pos < len(s.data) && s.data[s.pos] == '.' {
		s.pos++
		if digits() == 0 {
			return s.errf(start, "invalid number")
		}
	}
	if s.pos < len(s.data) && (s.data[s.pos] == 'e' || s.data[s.pos] == 'E') {
		s.pos++
		if s.pos < len(s.data) && (s.data[s.pos] == '+' || s.data[s.pos] == '-') {
			s.pos++
		}
		if digits() == 0 {
			return s.errf(start, "invalid number")
		}
	}
	return nil
}

func (e *fieldError) Error() string { return e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }
