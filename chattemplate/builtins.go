package chattemplate

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/language"
)

var (
	dictMethods = map[string]bool{"items": true, "keys": true, "values": true, "get": true, "copy": true}
	listMethods = map[string]bool{"index": true, "count": true, "copy": true}
	strMethods  = map[string]bool{
		"strip": true, "lstrip": true, "rstrip": true, "split": true, "rsplit": true, "splitlines": true,
		"startswith": true, "endswith": true, "replace": true, "upper": true, "lower": true, "title": true,
		"capitalize": true, "casefold": true, "swapcase": true, "find": true, "rfind": true, "index": true,
		"rindex": true, "count": true, "join": true, "isdigit": true, "isalpha": true, "isalnum": true,
		"isspace": true, "isupper": true, "islower": true, "isnumeric": true, "isdecimal": true,
		"zfill": true, "center": true, "ljust": true, "rjust": true, "partition": true, "rpartition": true,
		"removeprefix": true, "removesuffix": true, "format": true, "encode": true, "expandtabs": true,
		"istitle": true, "isidentifier": true, "isprintable": true, "isascii": true, "format_map": true,
		"translate": true, "maketrans": true,
	}
	dictUnsafe = map[string]bool{"pop": true, "popitem": true, "setdefault": true, "update": true, "clear": true}
	listUnsafe = map[string]bool{"append": true, "extend": true, "insert": true, "pop": true, "remove": true, "reverse": true, "sort": true, "clear": true}
)

// isUnsafeMethod reports methods ImmutableSandboxedEnvironment refuses.
func isUnsafeMethod(obj Value, name string) bool {
	switch obj.(type) {
	case *Dict:
		return dictUnsafe[name]
	case *List:
		return listUnsafe[name]
	}
	return false
}

var globalFuncs map[string]*builtinFunc

func init() {
	globalFuncs = map[string]*builtinFunc{
		"range":           {"range", fnRange},
		"namespace":       {"namespace", fnNamespace},
		"dict":            {"dict", fnDict},
		"raise_exception": {"raise_exception", fnRaise},
		"strftime_now":    {"strftime_now", fnStrftimeNow},
	}
	for _, n := range []string{"lipsum", "cycler", "joiner"} {
		name := n
		globalFuncs[n] = &builtinFunc{name, func(*renderer, []Value, []string, []Value) (Value, error) {
			return nil, unsupportedErr("the global %s()", name)
		}}
	}
}

func fnRange(r *renderer, args []Value, kn []string, kv []Value) (Value, error) {
	if len(kn) > 0 {
		return nil, typeErr("range() takes no keyword arguments")
	}
	var ints []int64
	for _, a := range args {
		n, ok := num(a)
		i, isInt := n.(int64)
		if !ok || !isInt {
			return nil, typeErr("'%s' object cannot be interpreted as an integer", pyTypeName(a))
		}
		ints = append(ints, i)
	}
	start, stop, step := int64(0), int64(0), int64(1)
	switch len(ints) {
	case 1:
		stop = ints[0]
	case 2:
		start, stop = ints[0], ints[1]
	case 3:
		start, stop, step = ints[0], ints[1], ints[2]
	default:
		return nil, typeErr("range expected at most 3 arguments, got %d", len(ints))
	}
	if step == 0 {
		return nil, typeErr("range() arg 3 must not be zero")
	}
	var n int64
	if step > 0 && stop > start {
		n = (stop - start + step - 1) / step
	} else if step < 0 && stop < start {
		n = (start - stop - step - 1) / -step
	}
	if n > 100000 {
		return nil, &pyErr{ErrLimit, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000)."}
	}
	l := &List{Items: make([]Value, 0, n)}
	for i := int64(0); i < n; i++ {
		l.Items = append(l.Items, start+i*step)
	}
	return l, nil
}

func kwDict(args []Value, kn []string, kv []Value, what string) (*Dict, error) {
	d := NewDict()
	if len(args) > 1 {
		return nil, typeErr("%s expected at most 1 argument, got %d", what, len(args))
	}
	if len(args) == 1 {
		switch a := args[0].(type) {
		case *Dict:
			d = a.Copy()
		default:
			return nil, unsupportedErr("%s(%s)", what, pyTypeName(a))
		}
	}
	for i, k := range kn {
		d.Set(k, kv[i])
	}
	return d, nil
}

func fnNamespace(r *renderer, args []Value, kn []string, kv []Value) (Value, error) {
	d, err := kwDict(args, kn, kv, "namespace")
	if err != nil {
		return nil, err
	}
	for _, k := range d.keys {
		if s, ok := k.(string); ok && strings.HasPrefix(s, "_") {
			return nil, &pyErr{ErrSecurity, fmt.Sprintf("Chat templates cannot store underscore-prefixed attributes on a namespace, but got %s. Please rename the attribute.", pyStrRepr(s))}
		}
	}
	return &namespace{d}, nil
}

func fnDict(r *renderer, args []Value, kn []string, kv []Value) (Value, error) {
	return kwDict(args, kn, kv, "dict")
}

func fnRaise(r *renderer, args []Value, kn []string, kv []Value) (Value, error) {
	msg := ""
	if len(args) > 0 {
		s, err := outputStr(args[0])
		if err != nil {
			return nil, err
		}
		msg = s
	}
	return nil, &pyErr{ErrRaised, msg}
}

func fnStrftimeNow(r *renderer, args []Value, kn []string, kv []Value) (Value, error) {
	if len(args) != 1 {
		return nil, typeErr("strftime_now() takes 1 argument")
	}
	f, ok := args[0].(string)
	if !ok {
		return nil, typeErr("strftime() argument 1 must be str, not %s", pyTypeName(args[0]))
	}
	return strftime(r.now(), f)
}

// --- Python str helpers ---

func pyStrip(s string, chars Value, left, right bool) (string, error) {
	f := isSpace
	if chars != nil {
		cs, ok := chars.(string)
		if !ok {
			if _, isU := chars.(undefined); !isU {
				return "", typeErr("strip arg must be None or str")
			}
		} else {
			f = func(r rune) bool { return strings.ContainsRune(cs, r) }
		}
	}
	if left {
		s = strings.TrimLeftFunc(s, f)
	}
	if right {
		s = strings.TrimRightFunc(s, f)
	}
	return s, nil
}

func pySplit(s string, sep Value, maxsplit int64, fromRight bool) (Value, error) {
	out := &List{}
	if sep == nil {
		fields := []string{}
		if !fromRight {
			rest := strings.TrimLeftFunc(s, isSpace)
			for rest != "" {
				if maxsplit >= 0 && int64(len(fields)) == maxsplit {
					fields = append(fields, rest)
					break
				}
				i := strings.IndexFunc(rest, isSpace)
				if i < 0 {
					fields = append(fields, rest)
					break
				}
				fields = append(fields, rest[:i])
				rest = strings.TrimLeftFunc(rest[i:], isSpace)
			}
		} else {
			rest := strings.TrimRightFunc(s, isSpace)
			for rest != "" {
				if maxsplit >= 0 && int64(len(fields)) == maxsplit {
					fields = append(fields, rest)
					break
				}
				i := strings.LastIndexFunc(rest, isSpace)
				if i < 0 {
					fields = append(fields, rest)
					break
				}
				_, sz := utf8.DecodeRuneInString(rest[i:])
				fields = append(fields, rest[i+sz:])
				rest = strings.TrimRightFunc(rest[:i], isSpace)
			}
			slices.Reverse(fields)
		}
		for _, f := range fields {
			out.Items = append(out.Items, f)
		}
		return out, nil
	}
	sp, ok := sep.(string)
	if !ok {
		return nil, typeErr("must be str or None, not %s", pyTypeName(sep))
	}
	if sp == "" {
		return nil, typeErr("empty separator")
	}
	var parts []string
	switch {
	case maxsplit < 0:
		parts = strings.Split(s, sp)
	case !fromRight:
		parts = strings.SplitN(s, sp, int(maxsplit)+1)
	default:
		rest := s
		for int64(len(parts)) < maxsplit {
			i := strings.LastIndex(rest, sp)
			if i < 0 {
				break
			}
			parts = append(parts, rest[i+len(sp):])
			rest = rest[:i]
		}
		parts = append(parts, rest)
		slices.Reverse(parts)
	}
	for _, p := range parts {
		out.Items = append(out.Items, p)
	}
	return out, nil
}

// pySplitlines is str.splitlines.
func pySplitlines(s string, keepends bool) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); {
		r, sz := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
			end := i + sz
			if r == '\r' && end < len(s) && s[end] == '\n' {
				end++
			}
			if keepends {
				out = append(out, s[start:end])
			} else {
				out = append(out, s[start:i])
			}
			start = end
			i = end
			continue
		}
		i += sz
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

var (
	upperCaser = cases.Upper(language.Und)
	lowerCaser = cases.Lower(language.Und)
)

func pyUpper(s string) string { return upperCaser.String(s) }
func pyLower(s string) string { return lowerCaser.String(s) }

var titleCaser = cases.Title(language.Und, cases.NoLower)

// pyTitleRune is the full title-case mapping of r (SpecialCasing
// included: ß → Ss, ŉ → ʼN, ΐ → Ϊ́).
func pyTitleRune(r rune) string {
	if r < 0x80 {
		return string(unicode.ToTitle(r))
	}
	return titleCaser.String(string(r))
}

func isCased(r rune) bool { return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) }

// isCaseIgnorable approximates Unicode's Case_Ignorable property.
func isCaseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '^', '`', 0xb7, 0x387, 0x5f4, 0x2018, 0x2019, 0x2024, 0x2027, 0xfe13, 0xfe52, 0xfe55, 0xff07, 0xff0e, 0xff1a:
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

func isCasedFull(r rune) bool {
	return isCased(r) || unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
}

// lowerAt is CPython's lower_ucs4: rs[i] lowercased, with capital sigma
// becoming final sigma in the Final_Sigma context of the whole string.
func lowerAt(rs []rune, i int) string {
	if rs[i] != 0x3a3 {
		return pyLower(string(rs[i]))
	}
	j := i - 1
	for j >= 0 && isCaseIgnorable(rs[j]) {
		j--
	}
	final := j >= 0 && isCasedFull(rs[j])
	if final && i < len(rs)-1 {
		j = i + 1
		for j < len(rs) && isCaseIgnorable(rs[j]) {
			j++
		}
		final = j == len(rs) || !isCasedFull(rs[j])
	}
	if final {
		return "\u03c2"
	}
	return "\u03c3"
}

// pyTitle is str.title.
func pyTitle(s string) string {
	var b strings.Builder
	rs := []rune(s)
	prevCased := false
	for i, r := range rs {
		if prevCased {
			b.WriteString(lowerAt(rs, i))
		} else {
			b.WriteString(pyTitleRune(r))
		}
		prevCased = isCased(r)
	}
	return b.String()
}

// pyCapitalize is str.capitalize.
func pyCapitalize(s string) string {
	if s == "" {
		return s
	}
	rs := []rune(s)
	var b strings.Builder
	b.WriteString(pyTitleRune(rs[0]))
	for i := 1; i < len(rs); i++ {
		b.WriteString(lowerAt(rs, i))
	}
	return b.String()
}

// jinjaTitle is jinja2's title filter: each word split at [-\s({\[<]+
// gets item[0].upper() + item[1:].lower().
func jinjaTitle(s string) string {
	var b strings.Builder
	isSep := func(r rune) bool { return r == '-' || r == '(' || r == '{' || r == '[' || r == '<' || isSpace(r) }
	for s != "" {
		i := strings.IndexFunc(s, func(r rune) bool { return !isSep(r) })
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		s = s[i:]
		j := strings.IndexFunc(s, isSep)
		if j < 0 {
			j = len(s)
		}
		_, sz := utf8.DecodeRuneInString(s)
		b.WriteString(pyUpper(s[:sz]))
		b.WriteString(pyLower(s[sz:j]))
		s = s[j:]
	}
	return b.String()
}

func pyCenter(s string, width int64, fill string) string {
	n := int64(runeLen(s))
	if width <= n {
		return s
	}
	marg := width - n
	left := marg/2 + (marg & width & 1)
	return strings.Repeat(fill, int(left)) + s + strings.Repeat(fill, int(marg-left))
}

// pyFind is str.find in code points.
func pyFind(s, sub string, last bool) int64 {
	var i int
	if last {
		i = strings.LastIndex(s, sub)
	} else {
		i = strings.Index(s, sub)
	}
	if i < 0 {
		return -1
	}
	return int64(runeLen(s[:i]))
}

func allRunes(s string, f func(rune) bool) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !f(r) {
			return false
		}
	}
	return true
}

func optInt(v Value, def int64) (int64, error) {
	if v == nil {
		return def, nil
	}
	n, ok := num(v)
	i, isInt := n.(int64)
	if !ok || !isInt {
		return 0, typeErr("'%s' object cannot be interpreted as an integer", pyTypeName(v))
	}
	return i, nil
}

// bindArgs maps positional and keyword arguments onto names.
func bindArgs(fname string, names []string, args []Value, kn []string, kv []Value) ([]Value, error) {
	if len(args) > len(names) {
		return nil, typeErr("%s() takes at most %d arguments (%d given)", fname, len(names), len(args))
	}
	out := make([]Value, len(names))
	copy(out, args)
	given := make([]bool, len(names))
	for i := range args {
		given[i] = true
	}
	for i, k := range kn {
		j := slices.Index(names, k)
		if j < 0 {
			return nil, typeErr("%s() got an unexpected keyword argument '%s'", fname, k)
		}
		if given[j] {
			return nil, typeErr("%s() got multiple values for argument '%s'", fname, k)
		}
		out[j] = kv[i]
		given[j] = true
	}
	return out, nil
}

func (r *renderer) callMethod(m *boundMethod, args []Value, kn []string, kv []Value) (Value, error) {
	switch recv := m.recv.(type) {
	case string:
		return r.strMethod(recv, m.name, args, kn, kv)
	case *Dict:
		if len(kn) > 0 {
			return nil, typeErr("%s() takes no keyword arguments", m.name)
		}
		switch m.name {
		case "items":
			l := &List{Items: make([]Value, 0, recv.Len()), view: "dict_items"}
			for i, k := range recv.keys {
				l.Items = append(l.Items, &List{Items: []Value{k, recv.vals[i]}, Tuple: true})
			}
			return l, nil
		case "keys":
			return &List{Items: append([]Value(nil), recv.keys...), view: "dict_keys"}, nil
		case "values":
			return &List{Items: append([]Value(nil), recv.vals...), view: "dict_values"}, nil
		case "copy":
			return recv.Copy(), nil
		case "get":
			if len(args) < 1 || len(args) > 2 {
				return nil, typeErr("get expected 1 or 2 arguments, got %d", len(args))
			}
			if _, ok := keyOf(args[0]); !ok {
				return nil, typeErr("unhashable type: '%s'", pyTypeName(args[0]))
			}
			if v, ok := recv.Get(args[0]); ok {
				return v, nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			return nil, nil
		}
	case *List:
		switch m.name {
		case "copy":
			return &List{Items: append([]Value(nil), recv.Items...), Tuple: recv.Tuple}, nil
		case "count":
			if len(args) != 1 {
				return nil, typeErr("count() takes exactly one argument")
			}
			n := int64(0)
			for _, it := range recv.Items {
				if pyEqual(it, args[0]) {
					n++
				}
			}
			return n, nil
		case "index":
			if len(args) != 1 {
				return nil, unsupportedErr("list.index with start/stop")
			}
			for i, it := range recv.Items {
				if pyEqual(it, args[0]) {
					return int64(i), nil
				}
			}
			return nil, typeErr("%s is not in list", mustRepr(args[0]))
		}
	case *loopObj:
		if m.name == "cycle" {
			if len(args) == 0 {
				return nil, typeErr("no items for cycling given")
			}
			return args[recv.i%len(args)], nil
		}
	}
	return nil, unsupportedErr("the method %s.%s()", pyTypeName(m.recv), m.name)
}

func (r *renderer) strMethod(s, name string, args []Value, kn []string, kv []Value) (Value, error) {
	str := func(v Value, what string) (string, error) {
		if m, ok := v.(markup); ok {
			return string(m), nil
		}
		x, ok := v.(string)
		if !ok {
			return "", typeErr("%s must be str, not %s", what, pyTypeName(v))
		}
		return x, nil
	}
	noKw := func() error {
		if len(kn) > 0 {
			return typeErr("str.%s() takes no keyword arguments", name)
		}
		return nil
	}
	switch name {
	case "strip", "lstrip", "rstrip":
		a, err := bindArgs(name, []string{"chars"}, args, nil, nil)
		if err != nil {
			return nil, err
		}
		if err := noKw(); err != nil {
			return nil, err
		}
		return pyStrip(s, a[0], name != "rstrip", name != "lstrip")
	case "split", "rsplit":
		a, err := bindArgs(name, []string{"sep", "maxsplit"}, args, kn, kv)
		if err != nil {
			return nil, err
		}
		ms, err := optInt(a[1], -1)
		if err != nil {
			return nil, err
		}
		return pySplit(s, a[0], ms, name == "rsplit")
	case "splitlines":
		a, err := bindArgs(name, []string{"keepends"}, args, kn, kv)
		if err != nil {
			return nil, err
		}
		l := &List{}
		for _, line := range pySplitlines(s, truthy(a[0])) {
			l.Items = append(l.Items, line)
		}
		return l, nil
	case "startswith", "endswith":
		if err := noKw(); err != nil {
			return nil, err
		}
		if len(args) != 1 {
			return nil, unsupportedErr("str.%s with start/end", name)
		}
		var cands []Value
		switch a := args[0].(type) {
		case *List:
			if !a.Tuple {
				return nil, typeErr("%s first arg must be str or a tuple of str, not list", name)
			}
			cands = a.Items
		default:
			cands = []Value{a}
		}
		for _, c := range cands {
			p, err := str(c, name+" first arg")
			if err != nil {
				return nil, err
			}
			if (name == "startswith" && strings.HasPrefix(s, p)) || (name == "endswith" && strings.HasSuffix(s, p)) {
				return true, nil
			}
		}
		return false, nil
	case "replace":
		if err := noKw(); err != nil {
			return nil, err
		}
		if len(args) < 2 || len(args) > 3 {
			return nil, typeErr("replace expected 2 or 3 arguments")
		}
		old, err := str(args[0], "replace() argument 1")
		if err != nil {
			return nil, err
		}
		nw, err := str(args[1], "replace() argument 2")
		if err != nil {
			return nil, err
		}
		n := int64(-1)
		if len(args) == 3 {
			if n, err = optInt(args[2], -1); err != nil {
				return nil, err
			}
		}
		return r.replace(s, old, nw, n)
	case "upper":
		return pyUpper(s), nil
	case "lower", "casefold":
		if name == "casefold" {
			return nil, unsupportedErr("str.casefold")
		}
		return pyLower(s), nil
	case "title":
		return pyTitle(s), nil
	case "capitalize":
		return pyCapitalize(s), nil
	case "find", "rfind", "index", "rindex", "count":
		if err := noKw(); err != nil {
			return nil, err
		}
		if len(args) != 1 {
			return nil, unsupportedErr("str.%s with start/end", name)
		}
		sub, err := str(args[0], "must be str")
		if err != nil {
			return nil, err
		}
		if name == "count" {
			if sub == "" {
				return int64(runeLen(s) + 1), nil
			}
			return int64(strings.Count(s, sub)), nil
		}
		i := pyFind(s, sub, name == "rfind" || name == "rindex")
		if i < 0 && (name == "index" || name == "rindex") {
			return nil, typeErr("substring not found")
		}
		return i, nil
	case "join":
		if len(args) != 1 {
			return nil, typeErr("join() takes exactly one argument")
		}
		items, err := r.iterate(args[0])
		if err != nil {
			return nil, err
		}
		parts := make([]string, len(items))
		total := 0
		for i, it := range items {
			p, err := str(it, fmt.Sprintf("sequence item %d: expected str instance,", i))
			if err != nil {
				return nil, typeErr("sequence item %d: expected str instance, %s found", i, pyTypeName(it))
			}
			parts[i] = p
			total += len(p) + len(s)
		}
		if err := r.checkLen(total); err != nil {
			return nil, err
		}
		return strings.Join(parts, s), nil
	case "isdigit", "isdecimal", "isnumeric":
		return allRunes(s, unicode.IsDigit), nil
	case "isalpha":
		return allRunes(s, unicode.IsLetter), nil
	case "isalnum":
		return allRunes(s, func(r rune) bool { return unicode.IsLetter(r) || unicode.IsNumber(r) }), nil
	case "isspace":
		return allRunes(s, isSpace), nil
	case "isupper", "islower":
		// Python: every cased character upper (lower), and at least one.
		cased := false
		for _, c := range s {
			lower := unicode.IsLower(c) || unicode.Is(unicode.Other_Lowercase, c)
			upper := unicode.IsUpper(c) || unicode.Is(unicode.Other_Uppercase, c)
			switch {
			case unicode.IsTitle(c):
				return false, nil
			case upper:
				if name == "islower" {
					return false, nil
				}
				cased = true
			case lower:
				if name == "isupper" {
					return false, nil
				}
				cased = true
			}
		}
		return cased, nil
	case "format":
		return pyStrFormat(s, args, kn, kv)
	case "removeprefix", "removesuffix":
		if len(args) != 1 {
			return nil, typeErr("%s() takes exactly one argument", name)
		}
		a, err := str(args[0], name+"() argument")
		if err != nil {
			return nil, err
		}
		if name == "removeprefix" {
			return strings.TrimPrefix(s, a), nil
		}
		return strings.TrimSuffix(s, a), nil
	case "partition", "rpartition":
		if len(args) != 1 {
			return nil, typeErr("%s() takes exactly one argument", name)
		}
		sep, err := str(args[0], "must be str")
		if err != nil {
			return nil, err
		}
		if sep == "" {
			return nil, typeErr("empty separator")
		}
		var i int
		if name == "partition" {
			i = strings.Index(s, sep)
		} else {
			i = strings.LastIndex(s, sep)
		}
		if i < 0 {
			if name == "partition" {
				return &List{Items: []Value{s, "", ""}, Tuple: true}, nil
			}
			return &List{Items: []Value{"", "", s}, Tuple: true}, nil
		}
		return &List{Items: []Value{s[:i], sep, s[i+len(sep):]}, Tuple: true}, nil
	case "center", "ljust", "rjust", "zfill":
		if len(args) < 1 {
			return nil, typeErr("%s() takes at least 1 argument", name)
		}
		w, err := optInt(args[0], 0)
		if err != nil {
			return nil, err
		}
		fill := " "
		if len(args) > 1 {
			if fill, err = str(args[1], "fill character"); err != nil {
				return nil, err
			}
		}
		if err := r.checkLen(int(min(w, int64(r.maxOut)+1))); err != nil {
			return nil, err
		}
		n := int64(runeLen(s))
		if w <= n {
			return s, nil
		}
		switch name {
		case "center":
			return pyCenter(s, w, fill), nil
		case "ljust":
			return s + strings.Repeat(fill, int(w-n)), nil
		case "rjust":
			return strings.Repeat(fill, int(w-n)) + s, nil
		}
		if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
			return s[:1] + strings.Repeat("0", int(w-n)) + s[1:], nil
		}
		return strings.Repeat("0", int(w-n)) + s, nil
	}
	return nil, unsupportedErr("the method str.%s()", name)
}

func (r *renderer) replace(s, old, nw string, n int64) (Value, error) {
	cnt := strings.Count(s, old)
	if old == "" {
		cnt = runeLen(s) + 1
	}
	if n >= 0 && int64(cnt) > n {
		cnt = int(n)
	}
	if err := r.checkLen(len(s) + cnt*len(nw)); err != nil {
		return nil, err
	}
	return strings.Replace(s, old, nw, int(n)), nil
}

// pyPercentFormat is Python's "fmt % args" for %s %r %d %i %f %%.
func pyPercentFormat(f string, arg Value) (Value, error) {
	var args []Value
	if l, ok := arg.(*List); ok && l.Tuple {
		args = l.Items
	} else {
		args = []Value{arg}
	}
	var b strings.Builder
	ai := 0
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(f) {
			return nil, typeErr("incomplete format")
		}
		// Optional precision like .2
		prec := -1
		if f[i] == '.' {
			j := i + 1
			for j < len(f) && f[j] >= '0' && f[j] <= '9' {
				j++
			}
			p, err := strconv.Atoi(f[i+1 : j])
			if err != nil {
				return nil, unsupportedErr("%% format %q", f)
			}
			prec = p
			i = j
			if i >= len(f) {
				return nil, typeErr("incomplete format")
			}
		}
		verb := f[i]
		if verb == '%' {
			b.WriteByte('%')
			continue
		}
		if ai >= len(args) {
			return nil, typeErr("not enough arguments for format string")
		}
		a := args[ai]
		ai++
		switch verb {
		case 's':
			s, err := outputStr(a)
			if err != nil {
				return nil, err
			}
			b.WriteString(s)
		case 'r':
			s, err := pyRepr(a)
			if err != nil {
				return nil, err
			}
			b.WriteString(s)
		case 'd', 'i':
			n, ok := num(a)
			if !ok {
				return nil, typeErr("%%%c format: a real number is required, not %s", verb, pyTypeName(a))
			}
			if fl, ok := n.(float64); ok {
				n = int64(fl)
			}
			b.WriteString(strconv.FormatInt(n.(int64), 10))
		case 'f':
			n, ok := num(a)
			if !ok {
				return nil, typeErr("must be real number, not %s", pyTypeName(a))
			}
			if prec < 0 {
				prec = 6
			}
			b.WriteString(strconv.FormatFloat(toFloat(n), 'f', prec, 64))
		default:
			return nil, unsupportedErr("the %%%c format", verb)
		}
	}
	if ai < len(args) {
		return nil, typeErr("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

func toInt(v Value, def Value) Value {
	switch v := v.(type) {
	case bool:
		return b2i(v)
	case int64:
		return v
	case float64:
		if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) >= 1<<63 {
			return def
		}
		return int64(v)
	case string, markup:
		s := strings.TrimFunc(asString(v), isSpace)
		if n, err := strconv.ParseInt(strings.ReplaceAll(s, "_", ""), 10, 64); err == nil {
			return n
		}
		if f, err := strconv.ParseFloat(s, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return int64(f)
		}
	}
	return def
}

func toFloatFilter(v Value, def Value) Value {
	switch v := v.(type) {
	case bool, int64, float64:
		return toFloat(v)
	case string, markup:
		s := strings.TrimFunc(asString(v), isSpace)
		if f, err := strconv.ParseFloat(s, 64); err == nil {
			return f
		}
	}
	return def
}

// pyStrFormat is str.format for replacement fields without a conversion
// or format spec ({}, {0}, {name}, {{ and }}); anything else is not
// implemented.
func pyStrFormat(f string, args []Value, kn []string, kv []Value) (Value, error) {
	var b strings.Builder
	auto, manual := 0, false
	for i := 0; i < len(f); i++ {
		c := f[i]
		switch {
		case c == '{' && i+1 < len(f) && f[i+1] == '{':
			b.WriteByte('{')
			i++
		case c == '}' && i+1 < len(f) && f[i+1] == '}':
			b.WriteByte('}')
			i++
		case c == '}':
			return nil, typeErr("Single '}' encountered in format string")
		case c == '{':
			j := strings.IndexByte(f[i:], '}')
			if j < 0 {
				return nil, typeErr("Single '{' encountered in format string")
			}
			field := f[i+1 : i+j]
			i += j
			var v Value
			switch {
			case strings.ContainsAny(field, "!:[.{"):
				return nil, unsupportedErr("str.format field {%s}", field)
			case field == "":
				if manual {
					return nil, typeErr("cannot switch from manual field specification to automatic field numbering")
				}
				if auto >= len(args) {
					return nil, typeErr("tuple index out of range")
				}
				v = args[auto]
				auto++
			case field[0] >= '0' && field[0] <= '9':
				if auto > 0 {
					return nil, typeErr("cannot switch from manual field specification to automatic field numbering")
				}
				manual = true
				n, err := strconv.Atoi(field)
				if err != nil || n >= len(args) {
					return nil, typeErr("tuple index out of range")
				}
				v = args[n]
			default:
				k := slices.Index(kn, field)
				if k < 0 {
					return nil, &pyErr{ErrType, pyStrRepr(field)}
				}
				v = kv[k]
			}
			out, err := outputStr(v)
			if err != nil {
				return nil, err
			}
			b.WriteString(out)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}
