package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// maxValueDepth bounds the nesting of values read from JSON and of values
// printed or serialized, so hostile input cannot exhaust the stack.
const maxValueDepth = 512

// ParseJSONValue parses one JSON value into a Value as Python's json.loads
// does: objects become *Dict with their keys in document order (a repeated
// key keeps its first place and its last value), arrays *List, numbers
// with a fraction or exponent float64, other numbers int64, null nil.
// Integers outside int64 are an error.
func ParseJSONValue(data []byte) (Value, error) {
	p := &jsonParser{s: data}
	p.ws()
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.ws()
	if p.i != len(p.s) {
		return nil, p.errf("extra data after the value")
	}
	return v, nil
}

type jsonParser struct {
	s []byte
	i int
}

func (p *jsonParser) errf(format string, args ...any) error {
	return fmt.Errorf("chattemplate: json: byte %d: %s", p.i, fmt.Sprintf(format, args...))
}

func (p *jsonParser) ws() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (Value, error) {
	if depth > maxValueDepth {
		return nil, p.errf("nested deeper than %d levels", maxValueDepth)
	}
	if p.i >= len(p.s) {
		return nil, p.errf("unexpected end of input")
	}
	switch c := p.s[p.i]; {
	case c == '{':
		p.i++
		d := NewDict()
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			return d, nil
		}
		for {
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != '"' {
				return nil, p.errf("want a string key")
			}
			k, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.i >= len(p.s) || p.s[p.i] != ':' {
				return nil, p.errf("want ':'")
			}
			p.i++
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			d.Set(k, v)
			p.ws()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == '}' {
				p.i++
				return d, nil
			}
			return nil, p.errf("want ',' or '}'")
		}
	case c == '[':
		p.i++
		l := &List{}
		p.ws()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return l, nil
		}
		for {
			p.ws()
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			l.Items = append(l.Items, v)
			p.ws()
			if p.i < len(p.s) && p.s[p.i] == ',' {
				p.i++
				continue
			}
			if p.i < len(p.s) && p.s[p.i] == ']' {
				p.i++
				return l, nil
			}
			return nil, p.errf("want ',' or ']'")
		}
	case c == '"':
		return p.str()
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []struct {
			s string
			v Value
		}{{"true", true}, {"false", false}, {"null", nil}} {
			if strings.HasPrefix(string(p.s[p.i:min(len(p.s), p.i+5)]), lit.s) {
				p.i += len(lit.s)
				return lit.v, nil
			}
		}
		return nil, p.errf("invalid literal")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	}
	return nil, p.errf("unexpected %q", p.s[p.i])
}

func (p *jsonParser) number() (Value, error) {
	start := p.i
	if p.s[p.i] == '-' {
		p.i++
	}
	digits := func() int {
		n := 0
		for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.i < len(p.s) && p.s[p.i] == '0' {
		p.i++
	} else if digits() == 0 {
		return nil, p.errf("invalid number")
	}
	isFloat := false
	if p.i < len(p.s) && p.s[p.i] == '.' {
		p.i++
		isFloat = true
		if digits() == 0 {
			return nil, p.errf("invalid number")
		}
	}
	if p.i < len(p.s) && (p.s[p.i] == 'e' || p.s[p.i] == 'E') {
		p.i++
		isFloat = true
		if p.i < len(p.s) && (p.s[p.i] == '+' || p.s[p.i] == '-') {
			p.i++
		}
		if digits() == 0 {
			return nil, p.errf("invalid number")
		}
	}
	text := string(p.s[start:p.i])
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, p.errf("invalid number %q", text)
		}
		return f, nil
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return nil, p.errf("integer %s does not fit in 64 bits", text)
	}
	return n, nil
}

func (p *jsonParser) str() (string, error) {
	p.i++ // opening quote
	var b []byte
	start := p.i
	for {
		if p.i >= len(p.s) {
			return "", p.errf("unterminated string")
		}
		c := p.s[p.i]
		switch {
		case c == '"':
			if b == nil {
				s := string(p.s[start:p.i])
				p.i++
				return toValidUTF8(s), nil
			}
			b = append(b, p.s[start:p.i]...)
			p.i++
			return toValidUTF8(string(b)), nil
		case c < 0x20:
			return "", p.errf("control character in string")
		case c == '\\':
			b = append(b, p.s[start:p.i]...)
			p.i++
			if p.i >= len(p.s) {
				return "", p.errf("unterminated string")
			}
			e := p.s[p.i]
			p.i++
			switch e {
			case '"', '\\', '/':
				b = append(b, e)
			case 'b':
				b = append(b, '\b')
			case 'f':
				b = append(b, '\f')
			case 'n':
				b = append(b, '\n')
			case 'r':
				b = append(b, '\r')
			case 't':
				b = append(b, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", p.errf("invalid \\u escape")
				}
				if utf16.IsSurrogate(r) && p.i+1 < len(p.s) && p.s[p.i] == '\\' && p.s[p.i+1] == 'u' {
					save := p.i
					p.i += 2
					r2, ok := p.hex4()
					if ok {
						if c := utf16.DecodeRune(r, r2); c != utf8.RuneError {
							r = c
						} else {
							p.i = save
						}
					} else {
						p.i = save
					}
				}
				b = utf8.AppendRune(b, r) // a lone surrogate becomes U+FFFD
			default:
				return "", p.errf("invalid escape \\%c", e)
			}
			start = p.i
		default:
			p.i++
		}
	}
}

func (p *jsonParser) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(p.s[p.i:p.i+4]), 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}

func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// jsonOpts are the arguments of transformers' tojson filter.
type jsonOpts struct {
	ensureASCII bool
	indent      string
	hasIndent   bool
	itemSep     string
	keySep      string
	sortKeys    bool
}

func defaultJSONOpts() jsonOpts { return jsonOpts{itemSep: ", ", keySep: ": "} }

// pyJSONDumps is json.dumps(v, ...) as transformers' tojson calls it.
func pyJSONDumps(v Value, o jsonOpts) (string, error) {
	var b strings.Builder
	if err := writeJSON(&b, v, &o, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeJSONString(b *strings.Builder, s string, ascii bool) {
	b.WriteByte('"')
	if !ascii {
		// Fast path: copy runs that need no escape.
		start := 0
		for i := 0; i < len(s); i++ {
			c := s[i]
			if c >= 0x20 && c != '"' && c != '\\' {
				continue
			}
			b.WriteString(s[start:i])
			switch c {
			case '"':
				b.WriteString(`\"`)
			case '\\':
				b.WriteString(`\\`)
			case '\n':
				b.WriteString(`\n`)
			case '\r':
				b.WriteString(`\r`)
			case '\t':
				b.WriteString(`\t`)
			case '\b':
				b.WriteString(`\b`)
			case '\f':
				b.WriteString(`\f`)
			default:
				fmt.Fprintf(b, `\u%04x`, c)
			}
			start = i + 1
		}
		b.WriteString(s[start:])
		b.WriteByte('"')
		return
	}
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			switch {
			case r < 0x20:
				fmt.Fprintf(b, `\u%04x`, r)
			case ascii && r > 0x7e:
				if r > 0xffff {
					r1, r2 := utf16.EncodeRune(r)
					fmt.Fprintf(b, `\u%04x\u%04x`, r1, r2)
				} else {
					fmt.Fprintf(b, `\u%04x`, r)
				}
			default:
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

func jsonFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	return pyFloatRepr(f)
}

func jsonKey(k Value) (string, error) {
	switch k := k.(type) {
	case string:
		return k, nil
	case markup:
		return string(k), nil
	case nil:
		return "null", nil
	case bool:
		if k {
			return "true", nil
		}
		return "false", nil
	case int64:
		return strconv.FormatInt(k, 10), nil
	case float64:
		return jsonFloat(k), nil
	}
	return "", fmt.Errorf("keys must be str, int, float, bool or None, not %s", pyTypeName(k))
}

func writeJSON(b *strings.Builder, v Value, o *jsonOpts, depth int) error {
	if depth > maxValueDepth {
		return fmt.Errorf("tojson: value nested deeper than %d levels", maxValueDepth)
	}
	newline := func(d int) {
		if o.hasIndent {
			b.WriteByte('\n')
			for range d {
				b.WriteString(o.indent)
			}
		}
	}
	switch v := v.(type) {
	case nil:
		b.WriteString("null")
	case bool:
		if v {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(v, 10))
	case float64:
		b.WriteString(jsonFloat(v))
	case string:
		writeJSONString(b, v, o.ensureASCII)
	case markup:
		writeJSONString(b, string(v), o.ensureASCII)
	case *List:
		if v.view != "" || v.lazy {
			//lint:ignore ST1005 Python's json.dumps message, matched by the goldens
			return fmt.Errorf("Object of type %s is not JSON serializable", pyTypeName(v))
		}
		if len(v.Items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, it := range v.Items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(depth + 1)
			if err := writeJSON(b, it, o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte(']')
	case *Dict:
		if v.Len() == 0 {
			b.WriteString("{}")
			return nil
		}
		type kv struct {
			k string
			v Value
		}
		items := make([]kv, 0, v.Len())
		for i, k := range v.keys {
			ks, err := jsonKey(k)
			if err != nil {
				return err
			}
			items = append(items, kv{ks, v.vals[i]})
		}
		if o.sortKeys {
			for _, k := range v.keys {
				if _, ok := k.(string); !ok {
					return errors.New("tojson: sort_keys with non-string keys is not implemented")
				}
			}
			slices.SortStableFunc(items, func(a, b kv) int { return compareCodePoints(a.k, b.k) })
		}
		b.WriteByte('{')
		for i, it := range items {
			if i > 0 {
				b.WriteString(o.itemSep)
			}
			newline(depth + 1)
			writeJSONString(b, it.k, o.ensureASCII)
			b.WriteString(o.keySep)
			if err := writeJSON(b, it.v, o, depth+1); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte('}')
	default:
		//lint:ignore ST1005 Python's json.dumps message, matched by the goldens
		return fmt.Errorf("Object of type %s is not JSON serializable", pyTypeName(v))
	}
	return nil
}

// compareCodePoints orders strings as Python does (by code point, which
// for valid UTF-8 is byte order).
func compareCodePoints(a, b string) int { return strings.Compare(a, b) }
