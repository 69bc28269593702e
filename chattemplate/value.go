package chattemplate

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Value is a template value. The dynamic types, and the Python types
// they stand for, are:
//
//	nil        None
//	bool       bool
//	int64      int
//	float64    float
//	string     str (UTF-8; indexed by code point)
//	*List      list (or tuple when Tuple is set)
//	*Dict      dict, insertion-ordered
//
// Values built by the engine while rendering (undefined names, macros,
// namespaces, loop objects, bound methods) are of unexported types.
type Value = any

// List is a Python list, or a tuple when Tuple is set.
type List struct {
	Items []Value
	Tuple bool
	lazy  bool   // a generator (map, select, ...): always true, not printable
	view  string // "dict_items", "dict_keys" or "dict_values": a dict view
}

// NewList returns a list holding items.
func NewList(items ...Value) *List { return &List{Items: items} }

// Dict is a Python dict: keys keep their insertion order. Keys are
// strings, ints or None (as a chat template's dict literals and JSON
// objects make them); 1, 1.0 and True are the same key, as in Python.
type Dict struct {
	keys []Value
	vals []Value
	idx  map[dictKey]int
}

type dictKey struct {
	kind byte // 's' string, 'i' int, 'f' float, 'n' None
	s    string
	i    int64
	f    float64
}

func keyOf(k Value) (dictKey, bool) {
	switch k := k.(type) {
	case string:
		return dictKey{kind: 's', s: k}, true
	case markup:
		return dictKey{kind: 's', s: string(k)}, true
	case bool:
		if k {
			return dictKey{kind: 'i', i: 1}, true
		}
		return dictKey{kind: 'i'}, true
	case int64:
		return dictKey{kind: 'i', i: k}, true
	case float64:
		if k == math.Trunc(k) && math.Abs(k) < 1<<62 {
			return dictKey{kind: 'i', i: int64(k)}, true
		}
		return dictKey{kind: 'f', f: k}, true
	case nil:
		return dictKey{kind: 'n'}, true
	}
	return dictKey{}, false
}

// NewDict returns an empty dict.
func NewDict() *Dict { return &Dict{} }

// dictIndexAt is the size from which a Dict keeps a map index; smaller
// dicts (most messages) are searched linearly.
const dictIndexAt = 12

// Len returns the number of keys.
func (d *Dict) Len() int { return len(d.keys) }

// Keys returns the keys in insertion order; the slice must not be modified.
func (d *Dict) Keys() []Value { return d.keys }

func (d *Dict) find(dk dictKey) int {
	if d.idx != nil {
		if i, ok := d.idx[dk]; ok {
			return i
		}
		return -1
	}
	for i, k := range d.keys {
		if kk, _ := keyOf(k); kk == dk {
			return i
		}
	}
	return -1
}

// Set sets key k to v; a new key goes last, an existing one keeps its place.
// It panics if k is not a string, int, float, bool or nil.
func (d *Dict) Set(k, v Value) {
	dk, ok := keyOf(k)
	if !ok {
		panic(fmt.Sprintf("chattemplate: unhashable dict key %T", k))
	}
	if i := d.find(dk); i >= 0 {
		d.vals[i] = v
		return
	}
	d.keys = append(d.keys, k)
	d.vals = append(d.vals, v)
	switch {
	case d.idx != nil:
		d.idx[dk] = len(d.keys) - 1
	case len(d.keys) >= dictIndexAt:
		d.reindex()
	}
}

func (d *Dict) reindex() {
	d.idx = make(map[dictKey]int, len(d.keys))
	for i, k := range d.keys {
		kk, _ := keyOf(k)
		d.idx[kk] = i
	}
}

// Get returns the value of key k.
func (d *Dict) Get(k Value) (Value, bool) {
	dk, ok := keyOf(k)
	if !ok {
		return nil, false
	}
	if i := d.find(dk); i >= 0 {
		return d.vals[i], true
	}
	return nil, false
}

// Delete removes key k, keeping the order of the others.
func (d *Dict) Delete(k Value) {
	dk, ok := keyOf(k)
	if !ok {
		return
	}
	i := d.find(dk)
	if i < 0 {
		return
	}
	d.keys = append(d.keys[:i], d.keys[i+1:]...)
	d.vals = append(d.vals[:i], d.vals[i+1:]...)
	if d.idx != nil {
		d.reindex()
	}
}

// Copy returns a shallow copy of d.
func (d *Dict) Copy() *Dict {
	c := &Dict{keys: append([]Value(nil), d.keys...), vals: append([]Value(nil), d.vals...)}
	if d.idx != nil {
		c.reindex()
	}
	return c
}

// undefined is jinja2's default Undefined: it prints as "", is false,
// iterates as empty and has length 0; any other use is an error.
type undefined struct {
	hint string // the UndefinedError message
}

// namespace is jinja2's namespace(): a dict whose attributes can be set.
type namespace struct{ d *Dict }

// pyTypeName is Python's type(v).__name__, as error messages show it.
func pyTypeName(v Value) string {
	switch v := v.(type) {
	case nil:
		return "NoneType"
	case bool:
		return "bool"
	case int64:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *List:
		if v.view != "" {
			return v.view
		}
		if v.Tuple {
			return "tuple"
		}
		return "list"
	case *Dict:
		return "dict"
	case undefined:
		return "Undefined"
	case *namespace:
		return "Namespace"
	case *macro:
		return "Macro"
	case *loopObj:
		return "LoopContext"
	case *boundMethod:
		return "builtin_function_or_method"
	case *builtinFunc:
		return "function"
	case markup:
		return "Markup"
	}
	return "object"
}

// truthy is Python's bool(v).
func truthy(v Value) bool {
	switch v := v.(type) {
	case nil:
		return false
	case bool:
		return v
	case int64:
		return v != 0
	case float64:
		return v != 0
	case string:
		return v != ""
	case *List:
		return v.lazy || len(v.Items) > 0
	case *Dict:
		return v.Len() > 0
	case undefined:
		return false
	case markup:
		return v != ""
	}
	return true
}

// pyFloatRepr is Python's repr(float).
func pyFloatRepr(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	// Shortest round-trip digits and the decimal exponent.
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddddde±XX
	neg := e[0] == '-'
	if neg {
		e = e[1:]
	}
	mant, exps, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(exps)
	digits := strings.Replace(mant, ".", "", 1)
	decpt := exp + 1 // number = 0.digits × 10^decpt
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	if decpt > 16 || decpt < -3 {
		b.WriteByte(digits[0])
		if len(digits) > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		x := decpt - 1
		if x < 0 {
			b.WriteByte('-')
			x = -x
		} else {
			b.WriteByte('+')
		}
		if x < 10 {
			b.WriteByte('0')
		}
		b.WriteString(strconv.Itoa(x))
		return b.String()
	}
	switch {
	case decpt <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -decpt))
		b.WriteString(digits)
	case decpt >= len(digits):
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", decpt-len(digits)))
		b.WriteString(".0")
	default:
		b.WriteString(digits[:decpt])
		b.WriteByte('.')
		b.WriteString(digits[decpt:])
	}
	return b.String()
}

// pyStrRepr is Python's repr(str).
func pyStrRepr(s string) string {
	q := byte('\'')
	if strings.IndexByte(s, '\'') >= 0 && strings.IndexByte(s, '"') < 0 {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == ' ' || (r >= 0x20 && r < 0x7f):
			b.WriteRune(r)
		case r < 0x100 && !pyPrintable(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case !pyPrintable(r) && r < 0x10000:
			fmt.Fprintf(&b, `\u%04x`, r)
		case !pyPrintable(r):
			fmt.Fprintf(&b, `\U%08x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}

// pyPrintable is Python's str.isprintable for one code point.
func pyPrintable(r rune) bool {
	if r == ' ' {
		return true
	}
	if r == utf8.RuneError {
		return true
	}
	return unicode.IsPrint(r)
}

// pyRepr is Python's repr(v).
func pyRepr(v Value) (string, error) {
	var b strings.Builder
	if err := writeRepr(&b, v, 0); err != nil {
		return "", err
	}
	return b.String(), nil
}

func writeRepr(b *strings.Builder, v Value, depth int) error {
	if depth > maxValueDepth {
		return fmt.Errorf("value nested deeper than %d levels", maxValueDepth)
	}
	switch v := v.(type) {
	case string:
		b.WriteString(pyStrRepr(v))
	case *List:
		open, close := "[", "]"
		if v.Tuple {
			open, close = "(", ")"
		}
		if v.view != "" {
			open, close = v.view+"([", "])"
		}
		b.WriteString(open)
		for i, it := range v.Items {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := writeRepr(b, it, depth+1); err != nil {
				return err
			}
		}
		if v.Tuple && len(v.Items) == 1 {
			b.WriteByte(',')
		}
		b.WriteString(close)
	case *Dict:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			if err := writeRepr(b, k, depth+1); err != nil {
				return err
			}
			b.WriteString(": ")
			if err := writeRepr(b, v.vals[i], depth+1); err != nil {
				return err
			}
		}
		b.WriteByte('}')
	case undefined:
		b.WriteString("Undefined")
	case *namespace:
		b.WriteString("<Namespace ")
		if err := writeRepr(b, v.d, depth+1); err != nil {
			return err
		}
		b.WriteString(">")
	default:
		s, err := pyStr(v)
		if err != nil {
			return err
		}
		b.WriteString(s)
	}
	return nil
}

// pyStr is Python's str(v), which is what {{ v }} prints.
func pyStr(v Value) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case nil:
		return "None", nil
	case bool:
		if v {
			return "True", nil
		}
		return "False", nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return pyFloatRepr(v), nil
	case undefined:
		return "", nil
	case *List, *Dict, *namespace:
		return pyRepr(v)
	}
	return "", unsupportedErr("printing a %s", pyTypeName(v))
}

// isSpace is Python's str.isspace for one code point.
func isSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x1f, 0x85:
		return true
	}
	if r < 0x80 {
		return false
	}
	// Bidirectional class WS, B or S, or category Zs.
	switch r {
	case 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return r >= 0x2000 && r <= 0x200a
}
