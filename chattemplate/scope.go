package chattemplate

import "sort"

// jinja2 decides at compile time, frame by frame (the template, a for
// loop's body, a macro's body, a set/filter/with/call/generation block),
// where each name is read from (jinja2/idtracking.py). A name stored in a
// frame without being read there first, and not known to an enclosing
// frame, starts that frame as undefined, even if the render's variables
// have it; inner frames see that undefined until the store runs. symbols
// reproduces this analysis; every other read resolves as the render goes,
// innermost frame first, then the variables, then the globals.

const (
	refResolve = 'r' // read from the enclosing context at frame entry
	refAlias   = 'a' // the enclosing frame's variable
	refUndef   = 'u' // starts undefined
	refParam   = 'p' // a parameter, loop variable or macro argument
)

type symbols struct {
	parent *symbols
	refs   map[string]byte
	stores map[string]bool
	// owner is the frame's symbols when these are an if branch's copy:
	// inner frames hang off the frame, complete, not off the copy.
	owner *symbols
}

func (s *symbols) frame() *symbols {
	if s.owner != nil {
		return s.owner
	}
	return s
}

func newSymbols(parent *symbols) *symbols {
	return &symbols{parent: parent, refs: map[string]byte{}, stores: map[string]bool{}}
}

func (s *symbols) findRef(name string) bool {
	for x := s; x != nil; x = x.parent {
		if _, ok := x.refs[name]; ok {
			return true
		}
	}
	return false
}

func (s *symbols) load(name string) {
	if !s.findRef(name) {
		s.refs[name] = refResolve
	}
}

func (s *symbols) store(name string) {
	s.stores[name] = true
	if _, ok := s.refs[name]; ok {
		return
	}
	if s.parent != nil && s.parent.findRef(name) {
		s.refs[name] = refAlias
		return
	}
	s.refs[name] = refUndef
}

func (s *symbols) param(name string) { s.refs[name] = refParam }

func (s *symbols) copy() *symbols {
	c := newSymbols(s.parent)
	c.owner = s.frame()
	for k, v := range s.refs {
		c.refs[k] = v
	}
	for k := range s.stores {
		c.stores[k] = true
	}
	return c
}

// branchUpdate merges the symbols of an if's branches (jinja2's
// Symbols.branch_update, jinja2 3.1.6): a name stored in a branch is
// read from the enclosing context or frame at frame entry, not undefined.
func (s *symbols) branchUpdate(branches []*symbols) {
	stored := map[string]bool{}
	for _, b := range branches {
		for t := range b.stores {
			if !s.stores[t] {
				stored[t] = true
			}
		}
	}
	for _, b := range branches {
		for k, v := range b.refs {
			s.refs[k] = v
		}
		for k := range b.stores {
			s.stores[k] = true
		}
	}
	for name := range stored {
		if s.parent != nil && s.parent.findRef(name) {
			s.refs[name] = refAlias
		} else {
			s.refs[name] = refResolve
		}
	}
}

func (s *symbols) undefNames() []string {
	var out []string
	for k, v := range s.refs {
		if v == refUndef {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// analyzer runs the analysis over a whole template.
type analyzer struct {
	pending []func()
}

// frame analyzes one frame's statements and returns the names it starts
// as undefined. Inner frames are analyzed after it, as jinja2 does.
func (a *analyzer) frame(parent *symbols, params []string, before func(*symbols), body []node) (*symbols, func() []string) {
	s := newSymbols(parent)
	for _, p := range params {
		s.param(p)
	}
	if before != nil {
		before(s)
	}
	a.nodes(s, body)
	return s, s.undefNames
}

func (a *analyzer) run(t *Template) {
	s, undef := a.frame(nil, nil, nil, t.body)
	_ = s
	t.undef = undef()
	for len(a.pending) > 0 {
		p := a.pending[0]
		a.pending = a.pending[1:]
		p()
	}
}

func (a *analyzer) nodes(s *symbols, body []node) {
	for _, n := range body {
		a.node(s, n)
	}
}

func (a *analyzer) node(s *symbols, n node) {
	f := s.frame() // the parent of inner frames
	switch n := n.(type) {
	case *outputNode:
		loads(s, n.x)
	case *ifNode:
		loads(s, n.conds[0])
		visit := func(f func(b *symbols)) *symbols {
			b := s.copy()
			f(b)
			return b
		}
		body := visit(func(b *symbols) { a.nodes(b, n.bodies[0]) })
		elifs := visit(func(b *symbols) {
			for i := 1; i < len(n.conds); i++ {
				loads(b, n.conds[i])
				inner := func(f func(c *symbols)) *symbols { c := b.copy(); f(c); return c }
				bb := inner(func(c *symbols) { a.nodes(c, n.bodies[i]) })
				b.branchUpdate([]*symbols{bb, inner(func(*symbols) {}), inner(func(*symbols) {})})
			}
		})
		els := visit(func(b *symbols) { a.nodes(b, n.els) })
		s.branchUpdate([]*symbols{body, elifs, els})
	case *forNode:
		loads(s, n.iter)
		a.pending = append(a.pending, func() {
			_, undef := a.frame(f, append(append([]string(nil), n.target.names...), "loop"), func(c *symbols) {
				if n.cond != nil {
					loads(c, n.cond)
				}
			}, n.body)
			n.undef = undef()
			if n.els != nil {
				_, undefEls := a.frame(f, nil, nil, n.els)
				n.elsUndef = undefEls()
			}
		})
	case *setNode:
		loads(s, n.x)
		storeTarget(s, n.target)
	case *setBlockNode:
		storeTarget(s, n.target)
		for _, f := range n.filters {
			loads(s, f)
		}
		a.pending = append(a.pending, func() {
			_, undef := a.frame(f, nil, nil, n.body)
			n.undef = undef()
		})
	case *macroNode:
		s.store(n.m.name)
		a.macro(f, n.m)
	case *callBlockNode:
		loads(s, n.call)
		a.macro(f, n.caller)
	case *filterBlockNode:
		for _, f := range n.filters {
			loads(s, f)
		}
		a.pending = append(a.pending, func() {
			_, undef := a.frame(f, nil, nil, n.body)
			n.undef = undef()
		})
	case *generationNode:
		a.pending = append(a.pending, func() {
			_, undef := a.frame(f, []string{"caller", "varargs", "kwargs"}, nil, n.body)
			n.undef = undef()
		})
	case *withNode:
		for _, v := range n.values {
			loads(s, v)
		}
		a.pending = append(a.pending, func() {
			var names []string
			for _, tg := range n.targets {
				names = append(names, tg.names...)
			}
			_, undef := a.frame(f, names, nil, n.body)
			n.undef = undef()
		})
	}
}

func (a *analyzer) macro(s *symbols, m *macroDef) {
	a.pending = append(a.pending, func() {
		params := append(append([]string(nil), m.params...), "varargs", "kwargs", "caller")
		_, undef := a.frame(s, params, func(c *symbols) {
			for _, d := range m.defaults {
				loads(c, d)
			}
		}, m.body)
		m.undef = undef()
	})
}

func storeTarget(s *symbols, tg assignTarget) {
	if tg.attr != "" {
		s.load(tg.names[0])
		return
	}
	for _, n := range tg.names {
		s.store(n)
	}
}

// loads records the names x reads, in evaluation order.
func loads(s *symbols, x expr) {
	switch x := x.(type) {
	case nil:
	case *nameExpr:
		s.load(x.name)
	case *listExpr:
		for _, it := range x.items {
			loads(s, it)
		}
	case *dictExpr:
		for i := range x.keys {
			loads(s, x.keys[i])
			loads(s, x.vals[i])
		}
	case *attrExpr:
		loads(s, x.x)
	case *itemExpr:
		loads(s, x.x)
		loads(s, x.key)
	case *sliceExpr:
		loads(s, x.x)
		loads(s, x.start)
		loads(s, x.stop)
		loads(s, x.stp)
	case *callExpr:
		loads(s, x.fn)
		for _, a := range x.args {
			loads(s, a)
		}
		for _, a := range x.kwvals {
			loads(s, a)
		}
	case *filterExpr:
		loads(s, x.arg)
		for _, a := range x.args {
			loads(s, a)
		}
		for _, a := range x.kwvals {
			loads(s, a)
		}
	case *testExpr:
		loads(s, x.arg)
		for _, a := range x.args {
			loads(s, a)
		}
	case *unaryExpr:
		loads(s, x.x)
	case *binExpr:
		loads(s, x.l)
		loads(s, x.r)
	case *compareExpr:
		loads(s, x.first)
		for _, r := range x.rest {
			loads(s, r)
		}
	case *condExpr:
		loads(s, x.then)
		loads(s, x.cond)
		loads(s, x.els)
	}
}
