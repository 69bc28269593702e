package chattemplate

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// jinjaFilters are all of jinja2's builtin filter names; the ones not
// handled in applyFilter fail as not implemented.
var jinjaFilters = map[string]bool{
	"abs": true, "attr": true, "batch": true, "capitalize": true, "center": true, "count": true, "d": true,
	"default": true, "dictsort": true, "e": true, "escape": true, "filesizeformat": true, "first": true,
	"float": true, "forceescape": true, "format": true, "groupby": true, "indent": true, "int": true,
	"items": true, "join": true, "last": true, "length": true, "list": true, "lower": true, "map": true,
	"max": true, "min": true, "pprint": true, "random": true, "reject": true, "rejectattr": true,
	"replace": true, "reverse": true, "round": true, "safe": true, "select": true, "selectattr": true,
	"slice": true, "sort": true, "string": true, "striptags": true, "sum": true, "title": true,
	"tojson": true, "trim": true, "truncate": true, "unique": true, "upper": true, "urlencode": true,
	"urlize": true, "wordcount": true, "wordwrap": true, "xmlattr": true,
}

func (r *renderer) applyFilter(f *filterExpr, in Value, sc *scope) (Value, error) {
	args, kv, err := r.evalArgs(f.args, f.kwvals, sc)
	if err != nil {
		return nil, err
	}
	return r.filter(f.name, in, args, f.kwnames, kv)
}

func (r *renderer) filter(name string, in Value, args []Value, kn []string, kv []Value) (Value, error) {
	if err := r.step(r.curLine); err != nil {
		return nil, err
	}
	bind := func(names ...string) ([]Value, error) { return bindArgs(name, names, args, kn, kv) }
	softStr := func(v Value) (string, error) {
		if m, ok := v.(markup); ok {
			return string(m), nil
		}
		return outputStr(v)
	}
	switch name {
	case "safe":
		s, err := softStr(in)
		return markup(s), err
	case "e", "escape":
		if m, ok := in.(markup); ok {
			return m, nil
		}
		s, err := softStr(in)
		return markup(htmlEscape(s)), err
	case "string":
		if m, ok := in.(markup); ok {
			return m, nil
		}
		return softStr(in)
	case "trim":
		a, err := bind("chars")
		if err != nil {
			return nil, err
		}
		s, err := softStr(in)
		if err != nil {
			return nil, err
		}
		return pyStrip(s, a[0], true, true)
	case "upper", "lower", "capitalize", "title":
		s, err := softStr(in)
		if err != nil {
			return nil, err
		}
		switch name {
		case "upper":
			return pyUpper(s), nil
		case "lower":
			return pyLower(s), nil
		case "capitalize":
			return pyCapitalize(s), nil
		}
		return jinjaTitle(s), nil
	case "length", "count":
		return pyLen(in)
	case "d", "default":
		a, err := bind("default_value", "boolean")
		if err != nil {
			return nil, err
		}
		if len(args) == 0 && !slices.Contains(kn, "default_value") {
			a[0] = ""
		}
		if _, ok := in.(undefined); ok || (truthy(a[1]) && !truthy(in)) {
			return a[0], nil
		}
		return in, nil
	case "join":
		a, err := bind("d", "attribute")
		if err != nil {
			return nil, err
		}
		sep := ""
		if a[0] != nil {
			if sep, err = softStr(a[0]); err != nil {
				return nil, err
			}
		}
		items, err := r.iterate(in)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for i, it := range items {
			if a[1] != nil {
				if it, err = attrPath(it, a[1]); err != nil {
					return nil, err
				}
			}
			s, err := softStr(it)
			if err != nil {
				return nil, err
			}
			if i > 0 {
				b.WriteString(sep)
			}
			b.WriteString(s)
			if err := r.checkLen(b.Len()); err != nil {
				return nil, err
			}
		}
		return b.String(), nil
	case "tojson":
		a, err := bind("ensure_ascii", "indent", "separators", "sort_keys")
		if err != nil {
			return nil, err
		}
		o := defaultJSONOpts()
		o.ensureASCII = truthy(a[0])
		switch ind := a[1].(type) {
		case nil:
		case int64:
			o.hasIndent = true
			o.indent = strings.Repeat(" ", int(max(ind, 0)))
			o.itemSep = ","
		case string:
			o.hasIndent = true
			o.indent = ind
			o.itemSep = ","
		default:
			return nil, unsupportedErr("tojson indent of type %s", pyTypeName(ind))
		}
		if a[2] != nil {
			l, ok := a[2].(*List)
			if !ok || len(l.Items) != 2 {
				return nil, typeErr("separators must be a pair of strings")
			}
			s0, ok0 := l.Items[0].(string)
			s1, ok1 := l.Items[1].(string)
			if !ok0 || !ok1 {
				return nil, typeErr("separators must be a pair of strings")
			}
			o.itemSep, o.keySep = s0, s1
		}
		o.sortKeys = truthy(a[3])
		s, err := pyJSONDumps(unmarkup(in), o)
		if err != nil {
			return nil, typeErr("%s", err.Error())
		}
		return s, nil
	case "items":
		switch d := in.(type) {
		case *Dict:
			l := &List{lazy: true}
			for i, k := range d.keys {
				l.Items = append(l.Items, &List{Items: []Value{k, d.vals[i]}, Tuple: true})
			}
			return l, nil
		case undefined:
			return &List{lazy: true}, nil
		}
		return nil, typeErr("Can only get item pairs from a mapping.")
	case "dictsort":
		a, err := bind("case_sensitive", "by", "reverse")
		if err != nil {
			return nil, err
		}
		d, ok := in.(*Dict)
		if !ok {
			return nil, typeErr("dictsort: expected a mapping")
		}
		pos := 0
		if a[1] != nil {
			switch a[1] {
			case "key":
			case "value":
				pos = 1
			default:
				return nil, typeErr("You can only sort by either \"key\" or \"value\"")
			}
		}
		l := &List{}
		for i, k := range d.keys {
			l.Items = append(l.Items, &List{Items: []Value{k, d.vals[i]}, Tuple: true})
		}
		err = sortValues(l.Items, func(v Value) (Value, error) {
			x := v.(*List).Items[pos]
			if !truthy(a[0]) {
				if s, ok := x.(string); ok {
					return pyLower(s), nil
				}
			}
			return x, nil
		}, truthy(a[2]))
		return l, err
	case "first":
		items, err := r.iterate(in)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{hint: "No first item, sequence was empty."}, nil
		}
		return items[0], nil
	case "last":
		if l, ok := in.(*List); ok && l.lazy {
			return nil, typeErr("'generator' object is not reversible")
		}
		items, err := r.iterate(in)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{hint: "No last item, sequence was empty."}, nil
		}
		return items[len(items)-1], nil
	case "list":
		items, err := r.iterate(in)
		if err != nil {
			return nil, err
		}
		return &List{Items: append([]Value(nil), items...)}, nil
	case "reverse":
		switch v := in.(type) {
		case string:
			rs := []rune(v)
			slices.Reverse(rs)
			return string(rs), nil
		case *List:
			out := &List{Items: append([]Value(nil), v.Items...), lazy: true}
			slices.Reverse(out.Items)
			return out, nil
		}
		return nil, typeErr("argument to reversed() must be a sequence")
	case "unique":
		a, err := bind("case_sensitive", "attribute")
		if err != nil {
			return nil, err
		}
		items, err := r.iterate(in)
		if err != nil {
			return nil, err
		}
		out := &List{lazy: true}
		var seen []Value
		for _, it := range items {
			key := it
			if a[1] != nil {
				if key, err = attrPath(it, a[1]); err != nil {
					return nil, err
				}
			}
			if s, ok := key.(string); ok && !truthy(a[0]) {
				key = pyLower(s)
			}
			dup := false
			for _, s := range seen {
				if pyEqual(s, key) {
					dup = true
					break
				}
			}
			if !dup {
				seen = append(seen, key)
				out.Items = append(out.Items, it)
			}
		}
		return out, nil
	case "sort":
		a, err := bind("reverse", "case_sensitive", "attribute")
		if err != nil {
			return nil, err
		}
		items, err := r.iterate(in)
		if err != nil {
			return nil, err
		}
		out := &List{Items: append([]Value(nil), items...)}
		err = sortValues(out.Items, func(v Value) (Value, error) {
			if a[2] != nil {
				var err error
				if v, err = attrPath(v, a[2]); err != nil {
					return nil, err
				}
			}
			if s, ok := v.(string); ok && !truthy(a[1]) {
				return pyLower(s), nil
			}
			return v, nil
		}, truthy(a[0]))
		return out, err
	case "min", "max", "sum":
		return r.aggregate(name, in, args, kn, kv)
	case "map", "select", "reject", "selectattr", "rejectattr":
		return r.mapSelect(name, in, args, kn, kv)
	case "attr":
		if len(args) != 1 {
			return nil, typeErr("attr() takes 1 argument")
		}
		n, ok := args[0].(string)
		if !ok {
			return nil, typeErr("attribute name must be string")
		}
		if d, ok := in.(*Dict); ok && !dictMethods[n] {
			return missingAttr(d, n), nil
		}
		return getAttr(in, n)
	case "int":
		a, err := bind("default", "base")
		if err != nil {
			return nil, err
		}
		if a[1] != nil && !pyEqual(a[1], int64(10)) {
			return nil, unsupportedErr("int filter with a base")
		}
		if a[0] == nil {
			a[0] = int64(0)
		}
		if f, ok := in.(float64); ok && math.Abs(f) >= 1<<63 && !math.IsInf(f, 0) {
			return nil, errOverflow
		}
		return toInt(in, a[0]), nil
	case "float":
		a, err := bind("default")
		if err != nil {
			return nil, err
		}
		if a[0] == nil {
			a[0] = 0.0
		}
		return toFloatFilter(in, a[0]), nil
	case "abs":
		switch v := in.(type) {
		case bool:
			return b2i(v), nil
		case int64:
			return abs64(v), nil
		case float64:
			return math.Abs(v), nil
		}
		return nil, typeErr("bad operand type for abs(): '%s'", pyTypeName(in))
	case "round":
		a, err := bind("precision", "method")
		if err != nil {
			return nil, err
		}
		p, err := optInt(a[0], 0)
		if err != nil {
			return nil, err
		}
		if (a[1] != nil && a[1] != "common") || p != 0 {
			return nil, unsupportedErr("round with a precision or method")
		}
		switch v := in.(type) {
		case int64:
			return v, nil
		case bool:
			return b2i(v), nil
		case float64:
			return math.RoundToEven(v), nil
		}
		return nil, typeErr("type %s doesn't define __round__ method", pyTypeName(in))
	case "replace":
		a, err := bind("old", "new", "count")
		if err != nil {
			return nil, err
		}
		s, err := softStr(in)
		if err != nil {
			return nil, err
		}
		old, err1 := softStr(a[0])
		nw, err2 := softStr(a[1])
		if err1 != nil || err2 != nil {
			return nil, typeErr("replace() arguments must be str")
		}
		n, err := optInt(a[2], -1)
		if err != nil {
			return nil, err
		}
		return r.replace(s, old, nw, n)
	case "indent":
		a, err := bind("width", "first", "blank")
		if err != nil {
			return nil, err
		}
		// jinja2 appends "\n" and calls splitlines: only str works.
		var s string
		switch v := in.(type) {
		case string:
			s = v
		case markup:
			s = string(v)
		case undefined:
			return nil, undefErr(v)
		case *List:
			return nil, typeErr("'%s' object has no attribute 'splitlines'", pyTypeName(v))
		default:
			return nil, typeErr("unsupported operand type(s) for +=: '%s' and 'str'", pyTypeName(v))
		}
		ind := "    "
		switch w := a[0].(type) {
		case nil:
		case string:
			ind = w
		case int64:
			ind = strings.Repeat(" ", int(max(w, 0)))
		default:
			return nil, typeErr("indent width must be an int or str")
		}
		s += "\n"
		lines := pySplitlines(s, false)
		var b strings.Builder
		if truthy(a[2]) {
			b.WriteString(strings.Join(lines, "\n"+ind))
		} else {
			b.WriteString(lines[0])
			for _, l := range lines[1:] {
				b.WriteString("\n")
				if l != "" {
					b.WriteString(ind)
				}
				b.WriteString(l)
			}
		}
		out := b.String()
		if truthy(a[1]) {
			out = ind + out
		}
		return out, r.checkLen(len(out))
	case "center":
		a, err := bind("width")
		if err != nil {
			return nil, err
		}
		w, err := optInt(a[0], 80)
		if err != nil {
			return nil, err
		}
		s, err := softStr(in)
		if err != nil {
			return nil, err
		}
		if err := r.checkLen(int(min(w, int64(r.maxOut)+1))); err != nil {
			return nil, err
		}
		return pyCenter(s, w, " "), nil
	case "format":
		if len(kn) > 0 {
			return nil, unsupportedErr("format filter with keyword arguments")
		}
		s, err := softStr(in)
		if err != nil {
			return nil, err
		}
		return pyPercentFormat(s, &List{Items: args, Tuple: true})
	}
	if jinjaFilters[name] {
		return nil, unsupportedErr("the filter '%s'", name)
	}
	return nil, &pyErr{ErrSyntax, fmt.Sprintf("No filter named '%s'.", name)}
}

func unmarkup(v Value) Value {
	if m, ok := v.(markup); ok {
		return string(m)
	}
	return v
}

// pyLen is len(v).
func pyLen(v Value) (Value, error) {
	switch v := v.(type) {
	case string:
		return int64(runeLen(v)), nil
	case markup:
		return int64(runeLen(string(v))), nil
	case *List:
		if v.lazy {
			return nil, typeErr("object of type 'generator' has no len()")
		}
		return int64(len(v.Items)), nil
	case *Dict:
		return int64(v.Len()), nil
	case undefined:
		return int64(0), nil
	}
	return nil, typeErr("object of type '%s' has no len()", pyTypeName(v))
}

// attrPath is jinja2's make_attrgetter: "a.b.0" looked up item by item.
func attrPath(v Value, attr Value) (Value, error) {
	switch a := attr.(type) {
	case int64:
		return getItem(v, a)
	case string:
		for _, part := range strings.Split(a, ".") {
			var key Value = part
			if n, ok := toInt(part, nil).(int64); ok && strings.TrimSpace(part) == part && part != "" && (part[0] >= '0' && part[0] <= '9') {
				key = n
			}
			var err error
			if v, err = getItem(v, key); err != nil {
				return nil, err
			}
		}
		return v, nil
	}
	return nil, typeErr("attribute must be a string or an int")
}

func sortValues(items []Value, key func(Value) (Value, error), reverse bool) error {
	keys := make([]Value, len(items))
	for i, it := range items {
		k, err := key(it)
		if err != nil {
			return err
		}
		keys[i] = k
	}
	idx := make([]int, len(items))
	for i := range idx {
		idx[i] = i
	}
	var firstErr error
	slices.SortStableFunc(idx, func(a, b int) int {
		x, y := keys[a], keys[b]
		if reverse {
			x, y = y, x
		}
		lt, err := pyLess(x, y)
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if lt {
			return -1
		}
		gt, _ := pyLess(y, x)
		if gt {
			return 1
		}
		return 0
	})
	if firstErr != nil {
		return firstErr
	}
	sorted := make([]Value, len(items))
	for i, j := range idx {
		sorted[i] = items[j]
	}
	copy(items, sorted)
	return nil
}

func (r *renderer) aggregate(name string, in Value, args []Value, kn []string, kv []Value) (Value, error) {
	names := []string{"case_sensitive", "attribute"}
	if name == "sum" {
		names = []string{"attribute", "start"}
	}
	a, err := bindArgs(name, names, args, kn, kv)
	if err != nil {
		return nil, err
	}
	items, err := r.iterate(in)
	if err != nil {
		return nil, err
	}
	if name == "sum" {
		var acc Value = int64(0)
		if a[1] != nil {
			acc = a[1]
		}
		for _, it := range items {
			if a[0] != nil {
				if it, err = attrPath(it, a[0]); err != nil {
					return nil, err
				}
			}
			if acc, err = r.binop("+", acc, it); err != nil {
				return nil, err
			}
		}
		return acc, nil
	}
	if len(items) == 0 {
		return undefined{hint: "No aggregated item, sequence was empty."}, nil
	}
	key := func(v Value) (Value, error) {
		if a[1] != nil {
			var err error
			if v, err = attrPath(v, a[1]); err != nil {
				return nil, err
			}
		}
		if s, ok := v.(string); ok && !truthy(a[0]) {
			return pyLower(s), nil
		}
		return v, nil
	}
	best := items[0]
	bk, err := key(best)
	if err != nil {
		return nil, err
	}
	for _, it := range items[1:] {
		k, err := key(it)
		if err != nil {
			return nil, err
		}
		var better bool
		if name == "min" {
			better, err = pyLess(k, bk)
		} else {
			better, err = pyLess(bk, k)
		}
		if err != nil {
			return nil, err
		}
		if better {
			best, bk = it, k
		}
	}
	return best, nil
}

func (r *renderer) mapSelect(name string, in Value, args []Value, kn []string, kv []Value) (Value, error) {
	items, err := r.iterate(in)
	if err != nil {
		return nil, err
	}
	out := &List{lazy: true}
	switch name {
	case "map":
		if len(args) == 0 {
			// map(attribute=..., default=...)
			var attr, def Value
			hasDef := false
			for i, k := range kn {
				switch k {
				case "attribute":
					attr = kv[i]
				case "default":
					def, hasDef = kv[i], true
				default:
					return nil, typeErr("map() got an unexpected keyword argument '%s'", k)
				}
			}
			if attr == nil {
				return nil, typeErr("map requires a filter argument")
			}
			for _, it := range items {
				v, err := attrPath(it, attr)
				if err != nil {
					return nil, err
				}
				if _, ok := v.(undefined); ok && hasDef {
					v = def
				}
				out.Items = append(out.Items, v)
			}
			return out, nil
		}
		fname, ok := args[0].(string)
		if !ok {
			return nil, typeErr("map: filter name must be a string")
		}
		for _, it := range items {
			v, err := r.filter(fname, it, args[1:], kn, kv)
			if err != nil {
				return nil, err
			}
			out.Items = append(out.Items, v)
		}
		return out, nil
	}
	if len(kn) > 0 {
		return nil, unsupportedErr("keyword arguments to %s", name)
	}
	var attr Value
	if name == "selectattr" || name == "rejectattr" {
		if len(args) == 0 {
			return nil, typeErr("Missing parameter for attribute name")
		}
		attr, args = args[0], args[1:]
	}
	want := name == "select" || name == "selectattr"
	for _, it := range items {
		v := it
		if attr != nil {
			if v, err = attrPath(it, attr); err != nil {
				return nil, err
			}
		}
		var ok bool
		if len(args) == 0 {
			ok = truthy(v)
		} else {
			tname, isStr := args[0].(string)
			if !isStr {
				return nil, typeErr("test name must be a string")
			}
			if ok, err = r.applyTest(tname, v, args[1:]); err != nil {
				return nil, err
			}
		}
		if ok == want {
			out.Items = append(out.Items, it)
		}
	}
	return out, nil
}

func (r *renderer) applyTest(name string, v Value, args []Value) (bool, error) {
	one := func() (Value, error) {
		if len(args) != 1 {
			return nil, typeErr("test '%s' takes 1 argument", name)
		}
		return args[0], nil
	}
	switch name {
	case "defined":
		_, u := v.(undefined)
		return !u, nil
	case "undefined":
		_, u := v.(undefined)
		return u, nil
	case "none":
		return v == nil, nil
	case "true":
		b, ok := v.(bool)
		return ok && b, nil
	case "false":
		b, ok := v.(bool)
		return ok && !b, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "string":
		switch v.(type) {
		case string, markup:
			return true, nil
		}
		return false, nil
	case "mapping":
		_, ok := v.(*Dict)
		return ok, nil
	case "number":
		switch v.(type) {
		case bool, int64, float64:
			return true, nil
		}
		return false, nil
	case "integer":
		_, ok := v.(int64)
		return ok, nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "sequence":
		switch x := v.(type) {
		case string, markup, *Dict:
			return true, nil
		case *List:
			return !x.lazy && x.view == "", nil
		}
		return false, nil
	case "iterable":
		switch v.(type) {
		case string, markup, *List, *Dict, undefined:
			return true, nil
		}
		return false, nil
	case "callable":
		switch v.(type) {
		case *macro, *builtinFunc, *boundMethod:
			return true, nil
		}
		return false, nil
	case "odd", "even", "divisibleby":
		// jinja2: value % 2 == 1, value % 2 == 0, value % num == 0.
		d := Value(int64(2))
		if name == "divisibleby" {
			a, err := one()
			if err != nil {
				return false, err
			}
			d = a
		}
		m, err := r.binop("%", v, d)
		if err != nil {
			return false, err
		}
		if name == "odd" {
			return pyEqual(m, int64(1)), nil
		}
		return pyEqual(m, int64(0)), nil
	case "eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt", "greaterthan", ">", "ge", ">=", "in", "sameas":
		a, err := one()
		if err != nil {
			return false, err
		}
		op := map[string]string{"eq": "==", "equalto": "==", "==": "==", "ne": "!=", "!=": "!=", "lt": "<", "lessthan": "<",
			"<": "<", "le": "<=", "<=": "<=", "gt": ">", "greaterthan": ">", ">": ">", "ge": ">=", ">=": ">=", "in": "in"}[name]
		if name == "sameas" {
			switch v.(type) {
			case nil, bool:
				return v == a, nil
			case *List, *Dict, *namespace:
				return v == a, nil
			}
			return false, unsupportedErr("the test 'sameas' on a %s", pyTypeName(v))
		}
		return compareOp(op, v, a)
	case "lower", "upper":
		s, err := outputStr(v)
		if err != nil {
			return false, err
		}
		m := "is" + name
		res, err := r.strMethod(s, m, nil, nil, nil)
		if err != nil {
			return false, err
		}
		return res.(bool), nil
	case "escaped":
		_, ok := v.(markup)
		return ok, nil
	case "filter":
		s, ok := v.(string)
		return ok && jinjaFilters[s], nil
	case "test":
		s, ok := v.(string)
		return ok && jinjaTests[s], nil
	}
	return false, &pyErr{ErrSyntax, fmt.Sprintf("No test named '%s'.", name)}
}

var jinjaTests = map[string]bool{
	"boolean": true, "callable": true, "defined": true, "divisibleby": true, "eq": true, "equalto": true,
	"escaped": true, "even": true, "false": true, "filter": true, "float": true, "ge": true, "gt": true,
	"greaterthan": true, "in": true, "integer": true, "iterable": true, "le": true, "lessthan": true,
	"lower": true, "lt": true, "mapping": true, "ne": true, "none": true, "number": true, "odd": true,
	"sameas": true, "sequence": true, "string": true, "test": true, "true": true, "undefined": true,
	"upper": true, "==": true, "!=": true, "<": true, "<=": true, ">": true, ">=": true,
}

var (
	longDays   = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}
	longMonths = []string{"January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November", "December"}
)

// strftime is Python's time.strftime in the C locale, for the directives
// chat templates use; others are an error.
func strftime(t time.Time, f string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' || i+1 >= len(f) {
			b.WriteByte(c)
			continue
		}
		i++
		pad := true
		if f[i] == '-' && i+1 < len(f) {
			pad = false
			i++
		}
		num := func(n, width int) {
			s := fmt.Sprint(n)
			if pad {
				for len(s) < width {
					s = "0" + s
				}
			}
			b.WriteString(s)
		}
		switch f[i] {
		case 'Y':
			b.WriteString(fmt.Sprint(t.Year()))
		case 'y':
			num(t.Year()%100, 2)
		case 'm':
			num(int(t.Month()), 2)
		case 'd':
			num(t.Day(), 2)
		case 'e':
			s := fmt.Sprint(t.Day())
			if pad && len(s) < 2 {
				s = " " + s
			}
			b.WriteString(s)
		case 'H':
			num(t.Hour(), 2)
		case 'I':
			h := t.Hour() % 12
			if h == 0 {
				h = 12
			}
			num(h, 2)
		case 'M':
			num(t.Minute(), 2)
		case 'S':
			num(t.Second(), 2)
		case 'j':
			num(t.YearDay(), 3)
		case 'p':
			if t.Hour() < 12 {
				b.WriteString("AM")
			} else {
				b.WriteString("PM")
			}
		case 'B':
			b.WriteString(longMonths[t.Month()-1])
		case 'b', 'h':
			b.WriteString(longMonths[t.Month()-1][:3])
		case 'A':
			b.WriteString(longDays[t.Weekday()])
		case 'a':
			b.WriteString(longDays[t.Weekday()][:3])
		case 'F':
			fmt.Fprintf(&b, "%d-%02d-%02d", t.Year(), t.Month(), t.Day())
		case 'T':
			fmt.Fprintf(&b, "%02d:%02d:%02d", t.Hour(), t.Minute(), t.Second())
		case '%':
			b.WriteByte('%')
		default:
			return "", unsupportedErr("the strftime directive %%%c", f[i])
		}
	}
	return b.String(), nil
}
