package chattemplate

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Template is a parsed chat template. It is immutable: any number of
// goroutines may render it at once.
type Template struct {
	name  string
	src   string
	body  []node
	undef []string // names the template frame starts as undefined (scope.go)
	// hasGeneration: a {% generation %} block anywhere.
	hasGeneration bool
}

// Name returns the name given to Parse.
func (t *Template) Name() string { return t.name }

// Source returns the text given to Parse.
func (t *Template) Source() string { return t.src }

// HasGeneration reports whether the template has a {% generation %}
// block; without one, Result.Generation is always empty (a mask built from
// it would train on nothing).
func (t *Template) HasGeneration() bool { return t.hasGeneration }

// Default limits; see Options.
const (
	DefaultMaxOutput = 64 << 20
	DefaultMaxSteps  = 10_000_000
	DefaultMaxDepth  = 100
)

// Options control a render. The zero value (or nil) uses the defaults.
type Options struct {
	// Now is the clock strftime_now reads. Default: time.Now, in the local
	// time zone, as transformers' datetime.now() does.
	Now func() time.Time
	// MaxOutput bounds the bytes of the output and of any string the
	// template builds. Default DefaultMaxOutput (64 MiB).
	MaxOutput int
	// MaxSteps bounds the statements executed, loop iterations and
	// filter/method calls made. Default DefaultMaxSteps.
	MaxSteps int
	// MaxDepth bounds the nesting of macro calls. Default DefaultMaxDepth.
	MaxDepth int
}

// Span is a {% generation %} block's output: Text[Start:End], in bytes;
// CharStart and CharEnd are the same in code points, as transformers
// reports them. A block inside a macro, set block or filter block is
// recorded as transformers records it: at the length of the top-level
// output so far, which is not where its text ends up.
type Span struct{ Start, End, CharStart, CharEnd int }

// Result is a rendered template.
type Result struct {
	Text string
	// Generation holds one span per {% generation %} block executed, in
	// order, as transformers' return_assistant_tokens_mask records them.
	Generation []Span
}

// renderer is the state of one Render call.
type renderer struct {
	t         *Template
	vars      map[string]Value
	bufs      []*strings.Builder
	spans     []Span
	steps     int
	depth     int
	maxOut    int
	maxSteps  int
	maxDepth  int
	now       func() time.Time
	curLine   int
	rootScope *scope
	// Code points in bufs[0][:rootCounted], for generation spans.
	rootRunes, rootCounted int
}

// scope is one frame's variables: few, so a slice beats a map.
type scope struct {
	names  []string
	vals   []Value
	parent *scope
}

func newScope(parent *scope) *scope { return &scope{parent: parent} }

// frameScope is a new frame's scope, with the names jinja2 starts as
// undefined in it.
func frameScope(parent *scope, undef []string) *scope {
	s := &scope{parent: parent}
	for _, n := range undef {
		s.set(n, undefined{hint: pyStrRepr(n) + " is undefined"})
	}
	return s
}

func (s *scope) set(name string, v Value) {
	for i, n := range s.names {
		if n == name {
			s.vals[i] = v
			return
		}
	}
	s.names = append(s.names, name)
	s.vals = append(s.vals, v)
}

func (s *scope) get(name string) (Value, bool) {
	for i, n := range s.names {
		if n == name {
			return s.vals[i], true
		}
	}
	return nil, false
}

// Render renders the template with vars as its context (for a chat:
// messages, tools, documents, add_generation_prompt, the special tokens
// and any extra keyword arguments; see Chat.Vars).
func (t *Template) Render(vars map[string]Value, opts *Options) (Result, error) {
	r := &renderer{t: t, vars: vars, maxOut: DefaultMaxOutput, maxSteps: DefaultMaxSteps, maxDepth: DefaultMaxDepth, now: time.Now}
	if opts != nil {
		if opts.Now != nil {
			r.now = opts.Now
		}
		if opts.MaxOutput > 0 {
			r.maxOut = opts.MaxOutput
		}
		if opts.MaxSteps > 0 {
			r.maxSteps = opts.MaxSteps
		}
		if opts.MaxDepth > 0 {
			r.maxDepth = opts.MaxDepth
		}
	}
	r.bufs = []*strings.Builder{{}}
	r.rootScope = frameScope(nil, t.undef)
	err := r.execBody(t.body, r.rootScope)
	if err != nil {
		if errors.Is(err, errBreak) || errors.Is(err, errContinue) {
			err = r.wrap(errors.New("loop control outside of a loop"), r.curLine)
		}
		return Result{}, err
	}
	return Result{Text: r.bufs[0].String(), Generation: r.spans}, nil
}

var (
	errBreak    = errors.New("break")
	errContinue = errors.New("continue")
)

// wrap gives err the template's name and line, once.
func (r *renderer) wrap(err error, line int) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) || err == errBreak || err == errContinue {
		return err
	}
	kind := ErrType
	var pe *pyErr
	if errors.As(err, &pe) {
		kind = pe.kind
	}
	return &Error{Template: r.t.name, Line: line, Msg: err.Error(), kind: kind}
}

func (r *renderer) step(line int) error {
	r.steps++
	if r.steps > r.maxSteps {
		return &Error{Template: r.t.name, Line: line, Msg: fmt.Sprintf("more than %d steps", r.maxSteps), kind: ErrLimit}
	}
	return nil
}

func (r *renderer) write(s string, line int) error {
	b := r.bufs[len(r.bufs)-1]
	if b.Len()+len(s) > r.maxOut {
		return &Error{Template: r.t.name, Line: line, Msg: fmt.Sprintf("output longer than %d bytes", r.maxOut), kind: ErrLimit}
	}
	b.WriteString(s)
	return nil
}

// checkLen bounds strings the template builds.
func (r *renderer) checkLen(n int) error {
	if n > r.maxOut {
		return &pyErr{ErrLimit, fmt.Sprintf("string longer than %d bytes", r.maxOut)}
	}
	return nil
}

// capture renders body into a fresh buffer and returns it.
func (r *renderer) capture(body []node, sc *scope) (string, error) {
	r.bufs = append(r.bufs, &strings.Builder{})
	err := r.execBody(body, sc)
	b := r.bufs[len(r.bufs)-1]
	r.bufs = r.bufs[:len(r.bufs)-1]
	return b.String(), err
}

func (r *renderer) execBody(body []node, sc *scope) error {
	for _, n := range body {
		if err := r.exec(n, sc); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) exec(n node, sc *scope) error {
	if t, ok := n.(*textNode); ok {
		return r.write(t.s, r.curLine)
	}
	line := n.nodeLine()
	r.curLine = line
	if err := r.step(line); err != nil {
		return err
	}
	switch n := n.(type) {
	case *outputNode:
		v, err := r.eval(n.x, sc)
		if err != nil {
			return r.wrap(err, line)
		}
		s, err := outputStr(v)
		if err != nil {
			return r.wrap(err, line)
		}
		return r.write(s, line)
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, sc)
			if err != nil {
				return r.wrap(err, c.exprLine())
			}
			if truthy(v) {
				return r.execBody(n.bodies[i], sc)
			}
		}
		return r.execBody(n.els, sc)
	case *forNode:
		return r.execFor(n, sc)
	case *setNode:
		v, err := r.eval(n.x, sc)
		if err != nil {
			return r.wrap(err, line)
		}
		return r.wrap(r.assign(n.target, v, sc), line)
	case *setBlockNode:
		s, err := r.capture(n.body, frameScope(sc, n.undef))
		if err != nil {
			return err
		}
		var v Value = s
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return r.wrap(err, line)
			}
		}
		return r.wrap(r.assign(n.target, v, sc), line)
	case *macroNode:
		sc.set(n.m.name, &macro{def: n.m, scope: sc})
		return nil
	case *callBlockNode:
		caller := &macro{def: n.caller, scope: sc}
		v, err := r.evalCall(n.call, sc, caller)
		if err != nil {
			return r.wrap(err, line)
		}
		s, err := outputStr(v)
		if err != nil {
			return r.wrap(err, line)
		}
		return r.write(s, line)
	case *filterBlockNode:
		s, err := r.capture(n.body, frameScope(sc, n.undef))
		if err != nil {
			return err
		}
		var v Value = s
		for _, f := range n.filters {
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return r.wrap(err, line)
			}
		}
		out, err := outputStr(v)
		if err != nil {
			return r.wrap(err, line)
		}
		return r.write(out, line)
	case *generationNode:
		s, err := r.capture(n.body, frameScope(sc, n.undef))
		if err != nil {
			return err
		}
		// transformers records len("".join(blocks yielded so far)): the
		// top-level output, even when the block sits inside a macro.
		root := r.bufs[0].String()
		r.rootRunes += utf8.RuneCountInString(root[r.rootCounted:])
		r.rootCounted = len(root)
		start, cstart := len(root), r.rootRunes
		r.spans = append(r.spans, Span{start, start + len(s), cstart, cstart + utf8.RuneCountInString(s)})
		return r.write(s, line)
	case *withNode:
		inner := frameScope(sc, n.undef)
		for i, tg := range n.targets {
			v, err := r.eval(n.values[i], sc)
			if err != nil {
				return r.wrap(err, line)
			}
			if err := r.assign(tg, v, inner); err != nil {
				return r.wrap(err, line)
			}
		}
		return r.execBody(n.body, inner)
	case *loopCtlNode:
		if n.brk {
			return errBreak
		}
		return errContinue
	}
	return &Error{Template: r.t.name, Line: line, Msg: fmt.Sprintf("statement %T", n), kind: ErrUnsupported}
}

// outputStr is what {{ v }} prints.
func outputStr(v Value) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case markup:
		return string(v), nil
	case *List:
		if v.lazy {
			return "", unsupportedErr("printing a generator (add |list)")
		}
	}
	return pyStr(v)
}

func (r *renderer) assign(tg assignTarget, v Value, sc *scope) error {
	if tg.attr != "" {
		obj, ok := r.lookup(tg.names[0], sc)
		ns, isNS := obj.(*namespace)
		if !ok || !isNS {
			return typeErr("cannot assign attribute on non-namespace object")
		}
		if strings.HasPrefix(tg.attr, "_") {
			return &pyErr{ErrSecurity, fmt.Sprintf("Chat templates cannot store underscore-prefixed attributes on a namespace, but got %s. Please rename the attribute.", pyStrRepr(tg.attr))}
		}
		ns.d.Set(tg.attr, v)
		return nil
	}
	if !tg.tuple {
		sc.set(tg.names[0], v)
		return nil
	}
	items, err := r.iterate(v)
	if err != nil {
		return err
	}
	if len(items) != len(tg.names) {
		if len(items) > len(tg.names) {
			return typeErr("too many values to unpack (expected %d)", len(tg.names))
		}
		return typeErr("not enough values to unpack (expected %d, got %d)", len(tg.names), len(items))
	}
	for i, n := range tg.names {
		sc.set(n, items[i])
	}
	return nil
}

// lookup resolves a name: scopes, then the render's variables, then the
// builtin globals.
func (r *renderer) lookup(name string, sc *scope) (Value, bool) {
	for s := sc; s != nil; s = s.parent {
		if v, ok := s.get(name); ok {
			return v, true
		}
	}
	if v, ok := r.vars[name]; ok {
		return v, true
	}
	if g, ok := globalFuncs[name]; ok {
		return g, true
	}
	return nil, false
}

func (r *renderer) execFor(n *forNode, sc *scope) error {
	line := n.line
	it, err := r.eval(n.iter, sc)
	if err != nil {
		return r.wrap(err, line)
	}
	items, err := r.iterate(it)
	if err != nil {
		return r.wrap(err, line)
	}
	if n.cond != nil {
		var kept []Value
		for _, item := range items {
			inner := newScope(sc)
			if err := r.assign(n.target, item, inner); err != nil {
				return r.wrap(err, line)
			}
			c, err := r.eval(n.cond, inner)
			if err != nil {
				return r.wrap(err, line)
			}
			if truthy(c) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.execBody(n.els, frameScope(sc, n.elsUndef))
	}
	lp := &loopObj{items: items}
	for i, item := range items {
		if err := r.step(line); err != nil {
			return err
		}
		lp.i = i
		inner := frameScope(sc, n.undef)
		if err := r.assign(n.target, item, inner); err != nil {
			return r.wrap(err, line)
		}
		inner.set("loop", lp)
		err := r.execBody(n.body, inner)
		if err == errBreak {
			break
		}
		if err == errContinue {
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// iterate returns the items a for loop sees.
func (r *renderer) iterate(v Value) ([]Value, error) {
	switch v := v.(type) {
	case *List:
		return v.Items, nil
	case *Dict:
		return append([]Value(nil), v.keys...), nil
	case string:
		out := make([]Value, 0, len(v))
		for _, c := range v {
			out = append(out, string(c))
		}
		return out, nil
	case markup:
		return r.iterate(string(v))
	case undefined:
		return nil, nil
	}
	return nil, typeErr("'%s' object is not iterable", pyTypeName(v))
}

// loopObj is the loop variable of a for loop.
type loopObj struct {
	items []Value
	i     int
}

func (l *loopObj) attr(name string) (Value, bool) {
	n := len(l.items)
	switch name {
	case "index":
		return int64(l.i + 1), true
	case "index0":
		return int64(l.i), true
	case "revindex":
		return int64(n - l.i), true
	case "revindex0":
		return int64(n - l.i - 1), true
	case "first":
		return l.i == 0, true
	case "last":
		return l.i == n-1, true
	case "length":
		return int64(n), true
	case "depth":
		return int64(1), true
	case "depth0":
		return int64(0), true
	case "previtem":
		if l.i == 0 {
			return undefined{hint: "there is no previous item"}, true
		}
		return l.items[l.i-1], true
	case "nextitem":
		if l.i == n-1 {
			return undefined{hint: "there is no next item"}, true
		}
		return l.items[l.i+1], true
	case "cycle":
		return &boundMethod{recv: l, name: "cycle"}, true
	}
	return nil, false
}

// macro is a defined macro (or a call block's caller) with the scope it
// was defined in.
type macro struct {
	def   *macroDef
	scope *scope
}

func (r *renderer) callMacro(m *macro, args []Value, kwnames []string, kwvals []Value, caller *macro) (Value, error) {
	r.depth++
	defer func() { r.depth-- }()
	if r.depth > r.maxDepth {
		return nil, &pyErr{ErrLimit, fmt.Sprintf("macro calls nested deeper than %d", r.maxDepth)}
	}
	d := m.def
	sc := frameScope(m.scope, d.undef)
	nparams := len(d.params)
	var varargs []Value
	if len(args) > nparams {
		varargs = args[nparams:]
		args = args[:nparams]
	}
	set := make([]bool, nparams)
	for i, a := range args {
		sc.set(d.params[i], a)
		set[i] = true
	}
	kw := NewDict()
	for i, k := range kwnames {
		found := false
		for j, p := range d.params {
			if p == k {
				if set[j] {
					return nil, typeErr("macro '%s' got multiple values for argument '%s'", d.name, k)
				}
				sc.set(p, kwvals[i])
				set[j] = true
				found = true
			}
		}
		if !found {
			kw.Set(k, kwvals[i])
		}
	}
	firstDefault := nparams - len(d.defaults)
	for j, p := range d.params {
		if set[j] {
			continue
		}
		if j >= firstDefault {
			v, err := r.eval(d.defaults[j-firstDefault], sc)
			if err != nil {
				return nil, err
			}
			sc.set(p, v)
		} else {
			sc.set(p, undefined{hint: fmt.Sprintf("parameter %s was not provided", pyStrRepr(p))})
		}
	}
	sc.set("varargs", &List{Items: varargs, Tuple: true})
	sc.set("kwargs", kw)
	if caller != nil {
		sc.set("caller", caller)
	}
	saved := r.curLine
	s, err := r.capture(d.body, sc)
	r.curLine = saved
	if err != nil {
		if err == errBreak || err == errContinue {
			return nil, typeErr("loop control outside of a loop")
		}
		return nil, err
	}
	return s, nil
}

// runeLen is len(s) in Python.
func runeLen(s string) int { return utf8.RuneCountInString(s) }
