package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strings"
)

// markup is markupsafe's Markup, what |safe and |e return. It prints as
// its text; "+" with a str escapes the str, as Python does.
type markup string

// boundMethod is a method looked up on a value, not yet called.
type boundMethod struct {
	recv Value
	name string
}

// builtinFunc is a global function (range, namespace, raise_exception, ...).
type builtinFunc struct {
	name string
	fn   func(r *renderer, args []Value, kwnames []string, kwvals []Value) (Value, error)
}

func (r *renderer) eval(x expr, sc *scope) (Value, error) {
	switch x := x.(type) {
	case *constExpr:
		return x.v, nil
	case *nameExpr:
		if v, ok := r.lookup(x.name, sc); ok {
			return v, nil
		}
		return undefined{hint: fmt.Sprintf("%s is undefined", pyStrRepr(x.name))}, nil
	case *listExpr:
		l := &List{Items: make([]Value, 0, len(x.items)), Tuple: x.tuple}
		for _, it := range x.items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			l.Items = append(l.Items, v)
		}
		return l, nil
	case *dictExpr:
		d := NewDict()
		for i := range x.keys {
			k, err := r.eval(x.keys[i], sc)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(x.vals[i], sc)
			if err != nil {
				return nil, err
			}
			if _, ok := keyOf(k); !ok {
				return nil, typeErr("unhashable type: '%s'", pyTypeName(k))
			}
			d.Set(k, v)
		}
		return d, nil
	case *attrExpr:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, x.name)
	case *itemExpr:
		obj, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		k, err := r.eval(x.key, sc)
		if err != nil {
			return nil, err
		}
		return getItem(obj, k)
	case *sliceExpr:
		return r.evalSlice(x, sc)
	case *callExpr:
		return r.evalCall(x, sc, nil)
	case *filterExpr:
		var in Value
		if x.arg != nil {
			v, err := r.eval(x.arg, sc)
			if err != nil {
				return nil, err
			}
			in = v
		}
		return r.applyFilter(x, in, sc)
	case *testExpr:
		v, err := r.eval(x.arg, sc)
		if err != nil {
			return nil, err
		}
		args := make([]Value, len(x.args))
		for i, a := range x.args {
			if args[i], err = r.eval(a, sc); err != nil {
				return nil, err
			}
		}
		ok, err := r.applyTest(x.name, v, args)
		if err != nil {
			return nil, err
		}
		return ok != x.negated, nil
	case *unaryExpr:
		v, err := r.eval(x.x, sc)
		if err != nil {
			return nil, err
		}
		switch x.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch v := v.(type) {
			case bool:
				return -b2i(v), nil
			case int64:
				if v == math.MinInt64 {
					return nil, unsupportedErr("integers beyond 64 bits")
				}
				return -v, nil
			case float64:
				return -v, nil
			case undefined:
				return nil, undefErr(v)
			}
			return nil, typeErr("bad operand type for unary -: '%s'", pyTypeName(v))
		default:
			switch v := v.(type) {
			case bool:
				return b2i(v), nil
			case int64, float64:
				return v, nil
			case undefined:
				return nil, undefErr(v)
			}
			return nil, typeErr("bad operand type for unary +: '%s'", pyTypeName(v))
		}
	case *binExpr:
		switch x.op {
		case "and":
			l, err := r.eval(x.l, sc)
			if err != nil || !truthy(l) {
				return l, err
			}
			return r.eval(x.r, sc)
		case "or":
			l, err := r.eval(x.l, sc)
			if err != nil || truthy(l) {
				return l, err
			}
			return r.eval(x.r, sc)
		}
		l, err := r.eval(x.l, sc)
		if err != nil {
			return nil, err
		}
		rv, err := r.eval(x.r, sc)
		if err != nil {
			return nil, err
		}
		return r.binop(x.op, l, rv)
	case *compareExpr:
		l, err := r.eval(x.first, sc)
		if err != nil {
			return nil, err
		}
		for i, op := range x.ops {
			rv, err := r.eval(x.rest[i], sc)
			if err != nil {
				return nil, err
			}
			ok, err := compareOp(op, l, rv)
			if err != nil {
				return nil, err
			}
			if !ok {
				return false, nil
			}
			l = rv
		}
		return true, nil
	case *condExpr:
		c, err := r.eval(x.cond, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(x.then, sc)
		}
		if x.els == nil {
			return undefined{hint: fmt.Sprintf("the inline if-expression on line %d evaluated to false and no else section was defined.", x.line)}, nil
		}
		return r.eval(x.els, sc)
	}
	return nil, unsupportedErr("expression %T", x)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// num converts bool to int, for arithmetic; ok false if v is not a number.
func num(v Value) (Value, bool) {
	switch v := v.(type) {
	case bool:
		return b2i(v), true
	case int64, float64:
		return v, true
	}
	return nil, false
}

func toFloat(v Value) float64 {
	switch v := v.(type) {
	case int64:
		return float64(v)
	case float64:
		return v
	case bool:
		return float64(b2i(v))
	}
	return 0
}

func htmlEscape(s string) string {
	if !strings.ContainsAny(s, "&<>'\"") {
		return s
	}
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "'", "&#39;", "\"", "&#34;").Replace(s)
}

func (r *renderer) binop(op string, l, rv Value) (Value, error) {
	if op == "~" {
		a, err := concatStr(l)
		if err != nil {
			return nil, err
		}
		b, err := concatStr(rv)
		if err != nil {
			return nil, err
		}
		if err := r.checkLen(len(a) + len(b)); err != nil {
			return nil, err
		}
		return a + b, nil
	}
	// str % x formats, whatever x is (str(undefined) is "").
	if s, ok := l.(string); ok && op == "%" {
		return pyPercentFormat(s, rv)
	}
	if u, ok := l.(undefined); ok {
		return nil, undefErr(u)
	}
	if u, ok := rv.(undefined); ok {
		return nil, undefErr(u)
	}
	// Markup + str escapes the str.
	if lm, ok := l.(markup); ok && op == "+" {
		switch b := rv.(type) {
		case markup:
			return lm + b, nil
		case string:
			return lm + markup(htmlEscape(b)), nil
		}
	}
	if rm, ok := rv.(markup); ok && op == "+" {
		if a, ok := l.(string); ok {
			return markup(htmlEscape(a)) + rm, nil
		}
	}
	if lm, ok := l.(markup); ok {
		l = string(lm)
	}
	if rm, ok := rv.(markup); ok {
		rv = string(rm)
	}
	ln, lok := num(l)
	rn, rok := num(rv)
	if lok && rok {
		return arith(op, ln, rn)
	}
	opName := op
	switch op {
	case "+":
		switch a := l.(type) {
		case string:
			if b, ok := rv.(string); ok {
				if err := r.checkLen(len(a) + len(b)); err != nil {
					return nil, err
				}
				return a + b, nil
			}
			return nil, typeErr("can only concatenate str (not \"%s\") to str", pyTypeName(rv))
		case *List:
			if a.view != "" {
				break
			}
			if b, ok := rv.(*List); ok && b.Tuple == a.Tuple && !a.lazy && !b.lazy && b.view == "" {
				if err := r.checkLen(16 * (len(a.Items) + len(b.Items))); err != nil {
					return nil, err
				}
				return &List{Items: append(append(make([]Value, 0, len(a.Items)+len(b.Items)), a.Items...), b.Items...), Tuple: a.Tuple}, nil
			}
			return nil, typeErr("can only concatenate %s (not \"%s\") to %s", pyTypeName(a), pyTypeName(rv), pyTypeName(a))
		}
	case "*":
		s, n := l, rv
		if _, ok := num(s); ok {
			s, n = rv, l
		}
		if k, ok := num(n); ok {
			if ki, ok := k.(int64); ok {
				if ki < 0 {
					ki = 0
				}
				switch s := s.(type) {
				case string:
					if err := r.checkLen(len(s) * int(min(ki, int64(r.maxOut)+1))); err != nil {
						return nil, err
					}
					return strings.Repeat(s, int(ki)), nil
				case *List:
					// A list item costs at least 16 bytes.
					if err := r.checkLen(16 * len(s.Items) * int(min(ki, int64(r.maxOut)+1))); err != nil {
						return nil, err
					}
					out := &List{Tuple: s.Tuple}
					for range ki {
						out.Items = append(out.Items, s.Items...)
					}
					return out, nil
				}
			}
		}
	case "%":
		if s, ok := l.(string); ok {
			return pyPercentFormat(s, rv)
		}
	case "**":
		opName = "** or pow()"
	}
	return nil, typeErr("unsupported operand type(s) for %s: '%s' and '%s'", opName, pyTypeName(l), pyTypeName(rv))
}

func concatStr(v Value) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case markup:
		return string(v), nil
	}
	return outputStr(v)
}

var errOverflow = unsupportedErr("integers beyond 64 bits")

func arith(op string, l, rv Value) (Value, error) {
	li, lInt := l.(int64)
	ri, rInt := rv.(int64)
	if lInt && rInt {
		switch op {
		case "+":
			s := li + ri
			if (s > li) != (ri > 0) {
				return nil, errOverflow
			}
			return s, nil
		case "-":
			s := li - ri
			if (s < li) != (ri > 0) {
				return nil, errOverflow
			}
			return s, nil
		case "*":
			if li == 0 || ri == 0 {
				return int64(0), nil
			}
			hi, lo := bits.Mul64(uint64(abs64(li)), uint64(abs64(ri)))
			if hi != 0 || lo > math.MaxInt64 {
				return nil, errOverflow
			}
			p := int64(lo)
			if (li < 0) != (ri < 0) {
				p = -p
			}
			return p, nil
		case "/":
			if ri == 0 {
				return nil, typeErr("division by zero")
			}
			return float64(li) / float64(ri), nil
		case "//":
			if ri == 0 {
				return nil, typeErr("integer division or modulo by zero")
			}
			q := li / ri
			if (li%ri != 0) && ((li < 0) != (ri < 0)) {
				q--
			}
			return q, nil
		case "%":
			if ri == 0 {
				return nil, typeErr("integer modulo by zero")
			}
			m := li % ri
			if m != 0 && ((m < 0) != (ri < 0)) {
				m += ri
			}
			return m, nil
		case "**":
			if ri < 0 {
				return math.Pow(float64(li), float64(ri)), nil
			}
			res := int64(1)
			for range ri {
				v, err := arith("*", res, li)
				if err != nil {
					return nil, err
				}
				res = v.(int64)
				if res == 0 || res == 1 {
					break
				}
			}
			return res, nil
		}
	}
	a, b := toFloat(l), toFloat(rv)
	switch op {
	case "+":
		return a + b, nil
	case "-":
		return a - b, nil
	case "*":
		return a * b, nil
	case "/":
		if b == 0 {
			return nil, typeErr("float division by zero")
		}
		return a / b, nil
	case "//":
		if b == 0 {
			return nil, typeErr("float floor division by zero")
		}
		return floatFloorDiv(a, b), nil
	case "%":
		if b == 0 {
			return nil, typeErr("float modulo")
		}
		m := math.Mod(a, b)
		if m != 0 && ((m < 0) != (b < 0)) {
			m += b
		} else if m == 0 {
			m = math.Copysign(0, b)
		}
		return m, nil
	case "**":
		p := math.Pow(a, b)
		if math.IsInf(p, 0) && !math.IsInf(a, 0) && !math.IsInf(b, 0) {
			if a == 0 {
				return nil, typeErr("0.0 cannot be raised to a negative power")
			}
			return nil, typeErr("(34, 'Numerical result out of range')")
		}
		return p, nil
	}
	return nil, unsupportedErr("operator %s", op)
}

// floatFloorDiv is CPython's float floor division (float_divmod).
func floatFloorDiv(a, b float64) float64 {
	mod := math.Mod(a, b)
	div := (a - mod) / b
	if mod != 0 && (b < 0) != (mod < 0) {
		div -= 1
	}
	if div == 0 {
		return math.Copysign(0, a/b)
	}
	fd := math.Floor(div)
	if div-fd > 0.5 {
		fd++
	}
	return fd
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// pyEqual is Python's ==.
func pyEqual(a, b Value) bool {
	if am, ok := a.(markup); ok {
		a = string(am)
	}
	if bm, ok := b.(markup); ok {
		b = string(bm)
	}
	an, aok := num(a)
	bn, bok := num(b)
	if aok && bok {
		ai, aInt := an.(int64)
		bi, bInt := bn.(int64)
		if aInt && bInt {
			return ai == bi
		}
		return toFloat(an) == toFloat(bn)
	}
	switch a := a.(type) {
	case nil:
		return b == nil
	case string:
		bs, ok := b.(string)
		return ok && a == bs
	case *List:
		bl, ok := b.(*List)
		if ok && (a.view != "" || bl.view != "") {
			// Views: keys and items compare as sets, values by identity.
			if a.view != bl.view || a.view == "dict_values" || len(a.Items) != len(bl.Items) {
				return a == bl
			}
			for _, x := range a.Items {
				if ok, _ := pyIn(x, &List{Items: bl.Items}); !ok {
					return false
				}
			}
			return true
		}
		if !ok || bl.Tuple != a.Tuple || len(a.Items) != len(bl.Items) {
			return a == bl
		}
		for i := range a.Items {
			if !pyEqual(a.Items[i], bl.Items[i]) {
				return false
			}
		}
		return true
	case *Dict:
		bd, ok := b.(*Dict)
		if !ok || a.Len() != bd.Len() {
			return false
		}
		for i, k := range a.keys {
			v, ok := bd.Get(k)
			if !ok || !pyEqual(a.vals[i], v) {
				return false
			}
		}
		return true
	case undefined:
		_, ok := b.(undefined)
		return ok
	}
	return a == b
}

// pyLess is Python's <, or a TypeError.
func pyLess(a, b Value) (bool, error) {
	if u, ok := a.(undefined); ok {
		return false, undefErr(u)
	}
	if u, ok := b.(undefined); ok {
		return false, undefErr(u)
	}
	an, aok := num(a)
	bn, bok := num(b)
	if aok && bok {
		ai, aInt := an.(int64)
		bi, bInt := bn.(int64)
		if aInt && bInt {
			return ai < bi, nil
		}
		return toFloat(an) < toFloat(bn), nil
	}
	switch a := a.(type) {
	case string:
		if bs, ok := b.(string); ok {
			return a < bs, nil
		}
	case *List:
		if bl, ok := b.(*List); ok && bl.Tuple == a.Tuple {
			for i := 0; i < len(a.Items) && i < len(bl.Items); i++ {
				if pyEqual(a.Items[i], bl.Items[i]) {
					continue
				}
				return pyLess(a.Items[i], bl.Items[i])
			}
			return len(a.Items) < len(bl.Items), nil
		}
	}
	return false, typeErr("'<' not supported between instances of '%s' and '%s'", pyTypeName(a), pyTypeName(b))
}

func compareOp(op string, a, b Value) (bool, error) {
	switch op {
	case "==":
		return pyEqual(a, b), nil
	case "!=":
		return !pyEqual(a, b), nil
	case "<", ">", "<=", ">=":
		x, y := a, b
		if op == ">" || op == ">=" {
			x, y = b, a
		}
		lt, err := pyLess(x, y)
		if err != nil {
			var pe *pyErr
			if errors.As(err, &pe) && pe.kind == ErrType {
				return false, typeErr("'%s' not supported between instances of '%s' and '%s'", op, pyTypeName(a), pyTypeName(b))
			}
			return false, err
		}
		if lt || len(op) == 1 {
			return lt, nil
		}
		return pyEqual(a, b), nil
	case "in":
		return pyIn(a, b)
	case "notin":
		ok, err := pyIn(a, b)
		return !ok, err
	}
	return false, unsupportedErr("comparison %s", op)
}

// pyIn is Python's "a in b".
func pyIn(a, b Value) (bool, error) {
	if bm, ok := b.(markup); ok {
		b = string(bm)
	}
	switch b := b.(type) {
	case string:
		if am, ok := a.(markup); ok {
			a = string(am)
		}
		s, ok := a.(string)
		if !ok {
			return false, typeErr("'in <string>' requires string as left operand, not %s", pyTypeName(a))
		}
		return strings.Contains(b, s), nil
	case *List:
		for _, it := range b.Items {
			if pyEqual(it, a) {
				return true, nil
			}
		}
		return false, nil
	case *Dict:
		if _, ok := keyOf(a); !ok {
			return false, typeErr("unhashable type: '%s'", pyTypeName(a))
		}
		_, ok := b.Get(a)
		return ok, nil
	case undefined:
		return false, nil
	case *namespace:
		return false, typeErr("argument of type 'Namespace' is not iterable")
	}
	return false, typeErr("argument of type '%s' is not iterable", pyTypeName(b))
}

// objectTypeRepr is jinja2's object_type_repr, used in undefined hints.
func objectTypeRepr(v Value) string {
	if v == nil {
		return "None"
	}
	if _, ok := v.(*namespace); ok {
		return "transformers.utils.chat_template_utils.TemplateNamespace object"
	}
	return pyTypeName(v) + " object"
}

func missingAttr(obj Value, name string) undefined {
	return undefined{hint: fmt.Sprintf("%s has no attribute %s", pyStrRepr(objectTypeRepr(obj)), pyStrRepr(name))}
}

// getAttr is jinja2's sandboxed getattr: the Python attribute first (a
// dict's methods, a str's methods), then the item.
func getAttr(obj Value, name string) (Value, error) {
	if u, ok := obj.(undefined); ok {
		return nil, undefErr(u)
	}
	if strings.HasPrefix(name, "_") {
		return undefined{hint: fmt.Sprintf("access to attribute %s of %s object is unsafe.", pyStrRepr(name), pyStrRepr(pyTypeName(obj)))}, nil
	}
	if isUnsafeMethod(obj, name) {
		{
			return undefined{hint: fmt.Sprintf("access to attribute %s of %s object is unsafe.", pyStrRepr(name), pyStrRepr(pyTypeName(obj)))}, nil
		}
	}
	switch o := obj.(type) {
	case *Dict:
		if dictMethods[name] {
			return &boundMethod{recv: o, name: name}, nil
		}
		if v, ok := o.Get(name); ok {
			return v, nil
		}
	case string, markup:
		if strMethods[name] {
			return &boundMethod{recv: asString(o), name: name}, nil
		}
	case *List:
		if listMethods[name] {
			return &boundMethod{recv: o, name: name}, nil
		}
	case *namespace:
		if v, ok := o.d.Get(name); ok {
			return v, nil
		}
	case *loopObj:
		if v, ok := o.attr(name); ok {
			return v, nil
		}
	}
	return missingAttr(obj, name), nil
}

// getItem is jinja2's getitem: obj[key], then the attribute named key.
func getItem(obj, key Value) (Value, error) {
	if u, ok := obj.(undefined); ok {
		return nil, undefErr(u)
	}
	if km, ok := key.(markup); ok {
		key = string(km)
	}
	switch o := obj.(type) {
	case *Dict:
		if _, ok := keyOf(key); ok {
			if v, ok := o.Get(key); ok {
				return v, nil
			}
		}
	case *List, string, markup:
		if o, ok := o.(*List); ok && (o.lazy || o.view != "") {
			break // not subscriptable: jinja2's getitem gives undefined
		}
		var idx int64
		isInt := false
		switch k := key.(type) {
		case int64:
			idx, isInt = k, true
		case bool:
			idx, isInt = b2i(k), true
		}
		if isInt {
			if l, ok := o.(*List); ok {
				n := int64(len(l.Items))
				if idx < 0 {
					idx += n
				}
				if idx >= 0 && idx < n {
					return l.Items[idx], nil
				}
			} else {
				rs := []rune(asString(o))
				n := int64(len(rs))
				if idx < 0 {
					idx += n
				}
				if idx >= 0 && idx < n {
					return string(rs[idx]), nil
				}
			}
			return undefined{hint: fmt.Sprintf("%s has no element %s", objectTypeRepr(obj), mustRepr(key))}, nil
		}
	}
	if s, ok := key.(string); ok {
		return getAttr(obj, s)
	}
	return undefined{hint: fmt.Sprintf("%s has no element %s", objectTypeRepr(obj), mustRepr(key))}, nil
}

func mustRepr(v Value) string {
	s, err := pyRepr(v)
	if err != nil {
		return "?"
	}
	return s
}

func asString(v Value) string {
	switch v := v.(type) {
	case string:
		return v
	case markup:
		return string(v)
	}
	return ""
}

func (r *renderer) evalSlice(x *sliceExpr, sc *scope) (Value, error) {
	obj, err := r.eval(x.x, sc)
	if err != nil {
		return nil, err
	}
	var bounds [3]*int64
	for i, e := range []expr{x.start, x.stop, x.stp} {
		if e == nil {
			continue
		}
		v, err := r.eval(e, sc)
		if err != nil {
			return nil, err
		}
		switch v := v.(type) {
		case nil:
		case int64:
			bounds[i] = &v
		case bool:
			n := b2i(v)
			bounds[i] = &n
		default:
			return nil, typeErr("slice indices must be integers or None or have an __index__ method")
		}
	}
	if u, ok := obj.(undefined); ok {
		return nil, undefErr(u)
	}
	var n int
	var rs []rune
	switch o := obj.(type) {
	case *List:
		if o.lazy {
			return nil, typeErr("'generator' object is not subscriptable")
		}
		if o.view != "" {
			return nil, typeErr("'%s' object is not subscriptable", o.view)
		}
		n = len(o.Items)
	case string, markup:
		rs = []rune(asString(o))
		n = len(rs)
	case *Dict:
		// jinja2 slices with Python's [] directly, not its getitem.
		return nil, typeErr("unhashable type: 'slice'")
	default:
		return nil, typeErr("'%s' object is not subscriptable", pyTypeName(obj))
	}
	idx, err := sliceIndices(n, bounds[0], bounds[1], bounds[2])
	if err != nil {
		return nil, err
	}
	if l, ok := obj.(*List); ok {
		out := &List{Tuple: l.Tuple, Items: make([]Value, 0, len(idx))}
		for _, i := range idx {
			out.Items = append(out.Items, l.Items[i])
		}
		return out, nil
	}
	var b strings.Builder
	for _, i := range idx {
		b.WriteRune(rs[i])
	}
	return b.String(), nil
}

// sliceIndices is Python's slice.indices, expanded.
func sliceIndices(n int, start, stop, step *int64) ([]int, error) {
	st := int64(1)
	if step != nil {
		st = *step
	}
	if st == 0 {
		return nil, typeErr("slice step cannot be zero")
	}
	N := int64(n)
	adj := func(p *int64, def int64, lo, hi int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += N
			if v < lo {
				v = lo
			}
		} else if v > hi {
			v = hi
		}
		return v
	}
	var out []int
	if st > 0 {
		a := adj(start, 0, 0, N)
		b := adj(stop, N, 0, N)
		for i := a; i < b; i += st {
			out = append(out, int(i))
		}
	} else {
		a := adj(start, N-1, -1, N-1)
		b := adj(stop, -1, -1, N-1)
		for i := a; i > b; i += st {
			out = append(out, int(i))
		}
	}
	return out, nil
}

func (r *renderer) evalArgs(args []expr, kwvals []expr, sc *scope) ([]Value, []Value, error) {
	av := make([]Value, len(args))
	for i, a := range args {
		v, err := r.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		av[i] = v
	}
	kv := make([]Value, len(kwvals))
	for i, a := range kwvals {
		v, err := r.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		kv[i] = v
	}
	return av, kv, nil
}

func (r *renderer) evalCall(x *callExpr, sc *scope, caller *macro) (Value, error) {
	fn, err := r.eval(x.fn, sc)
	if err != nil {
		return nil, err
	}
	args, kwvals, err := r.evalArgs(x.args, x.kwvals, sc)
	if err != nil {
		return nil, err
	}
	return r.call(fn, args, x.kwnames, kwvals, caller)
}

func (r *renderer) call(fn Value, args []Value, kwnames []string, kwvals []Value, caller *macro) (Value, error) {
	if err := r.step(r.curLine); err != nil {
		return nil, err
	}
	switch f := fn.(type) {
	case *macro:
		return r.callMacro(f, args, kwnames, kwvals, caller)
	case *builtinFunc:
		return f.fn(r, args, kwnames, kwvals)
	case *boundMethod:
		return r.callMethod(f, args, kwnames, kwvals)
	case undefined:
		if strings.HasPrefix(f.hint, "access to attribute") {
			return nil, &pyErr{ErrSecurity, f.hint}
		}
		return nil, undefErr(f)
	}
	return nil, typeErr("'%s' object is not callable", pyTypeName(fn))
}
