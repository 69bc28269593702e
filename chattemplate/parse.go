package chattemplate

import (
	"fmt"
	"slices"
	"strings"
)

// node is a statement of the template body.
type node interface{ nodeLine() int }

// expr is an expression.
type expr interface{ exprLine() int }

type pos struct{ line int }

func (p pos) nodeLine() int { return p.line }
func (p pos) exprLine() int { return p.line }

type (
	textNode   struct{ s string }
	outputNode struct {
		pos
		x expr
	}
	ifNode struct {
		pos
		conds  []expr
		bodies [][]node
		els    []node
	}
	forNode struct {
		pos
		undef     []string // names the body frame starts as undefined (scope.go)
		elsUndef  []string
		target    assignTarget
		iter      expr
		cond      expr
		body, els []node
	}
	// assignTarget is a name, a tuple of names, or ns.attr.
	assignTarget struct {
		names []string // one name, or a tuple's names
		tuple bool
		attr  string // when set: names[0].attr
	}
	setNode struct {
		pos
		target assignTarget
		x      expr
	}
	setBlockNode struct {
		pos
		undef   []string
		target  assignTarget
		filters []*filterExpr // applied to the body; Arg nil
		body    []node
	}
	macroNode struct {
		pos
		m *macroDef
	}
	callBlockNode struct {
		pos
		call   *callExpr
		caller *macroDef
	}
	filterBlockNode struct {
		pos
		undef   []string
		filters []*filterExpr
		body    []node
	}
	generationNode struct {
		pos
		undef []string
		body  []node
	}
	withNode struct {
		pos
		undef   []string
		targets []assignTarget
		values  []expr
		body    []node
	}
	loopCtlNode struct {
		pos
		brk bool
	}
)

func (textNode) nodeLine() int { return 0 }

type macroDef struct {
	undef    []string
	name     string
	params   []string
	defaults []expr // aligned to the tail of params
	body     []node
	line     int
}

type (
	constExpr struct {
		pos
		v Value
	}
	nameExpr struct {
		pos
		name string
	}
	listExpr struct {
		pos
		items []expr
		tuple bool
	}
	dictExpr struct {
		pos
		keys, vals []expr
	}
	attrExpr struct {
		pos
		x    expr
		name string
	}
	itemExpr struct {
		pos
		x, key expr
	}
	sliceExpr struct {
		pos
		x                expr
		start, stop, stp expr // nil when absent
	}
	callExpr struct {
		pos
		fn      expr
		args    []expr
		kwnames []string
		kwvals  []expr
	}
	filterExpr struct {
		pos
		name    string
		arg     expr
		args    []expr
		kwnames []string
		kwvals  []expr
	}
	testExpr struct {
		pos
		name    string
		arg     expr
		args    []expr
		negated bool
	}
	unaryExpr struct {
		pos
		op string // "-", "+", "not"
		x  expr
	}
	binExpr struct {
		pos
		op   string // + - * / // % ** ~ and or
		l, r expr
	}
	compareExpr struct {
		pos
		first expr
		ops   []string // == != < <= > >= in notin
		rest  []expr
	}
	condExpr struct {
		pos
		cond, then, els expr // els nil: undefined
	}
)

type parser struct {
	name string
	toks []token
	i    int
	// Loop and macro nesting, for break/continue and caller checks.
	loopDepth     int
	depth         int
	hasGeneration bool
}

// maxParseDepth bounds the nesting of blocks and expressions.
const maxParseDepth = 200

func (p *parser) cur() token  { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) failf(line int, format string, args ...any) error {
	return &Error{Template: p.name, Line: line, Msg: fmt.Sprintf(format, args...), kind: ErrSyntax}
}

func (p *parser) unsupported(line int, what string) error {
	return &Error{Template: p.name, Line: line, Msg: what + " is not implemented", kind: ErrUnsupported}
}

func (p *parser) isOp(s string) bool {
	t := p.cur()
	return t.kind == tOp && t.val == s
}

func (p *parser) isName(s string) bool {
	t := p.cur()
	return t.kind == tName && t.val == s
}

func (p *parser) expectOp(s string) error {
	if !p.isOp(s) {
		return p.failf(p.cur().line, "expected '%s', got %s", s, describe(p.cur()))
	}
	p.i++
	return nil
}

func (p *parser) expectBlockEnd() error {
	if p.cur().kind != tBlockEnd {
		return p.failf(p.cur().line, "expected end of statement block, got %s", describe(p.cur()))
	}
	p.i++
	return nil
}

func (p *parser) expectName() (string, error) {
	t := p.cur()
	if t.kind != tName {
		return "", p.failf(t.line, "expected a name, got %s", describe(t))
	}
	p.i++
	return t.val, nil
}

func describe(t token) string {
	switch t.kind {
	case tData:
		return "template data"
	case tVarBegin:
		return "'{{'"
	case tVarEnd:
		return "'}}'"
	case tBlockBegin:
		return "'{%'"
	case tBlockEnd:
		return "end of statement block"
	case tName:
		return "'" + t.val + "'"
	case tString:
		return "string"
	case tInt, tFloat:
		return "number"
	case tOp:
		return "'" + t.val + "'"
	}
	return "end of template"
}

// Parse compiles a chat template. name appears in error messages.
func Parse(name, src string) (*Template, error) {
	toks, err := lex(name, src)
	if err != nil {
		return nil, err
	}
	p := &parser{name: name, toks: toks}
	body, end, err := p.parseBody(nil)
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, p.failf(p.cur().line, "unexpected '%s'", end)
	}
	t := &Template{name: name, src: src, body: body, hasGeneration: p.hasGeneration}
	(&analyzer{}).run(t)
	return t, nil
}

// parseBody parses statements until a block tag whose name is in ends (the
// tag's name is returned, its "{%" and name consumed) or the end of input.
func (p *parser) parseBody(ends []string) ([]node, string, error) {
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxParseDepth {
		return nil, "", p.failf(p.cur().line, "blocks nested deeper than %d", maxParseDepth)
	}
	var body []node
	for {
		t := p.cur()
		switch t.kind {
		case tEOF:
			if len(ends) > 0 {
				return nil, "", p.failf(t.line, "unexpected end of template: expected '%s'", strings.Join(ends, "' or '"))
			}
			return body, "", nil
		case tData:
			p.i++
			body = append(body, &textNode{s: t.val})
		case tVarBegin:
			p.i++
			x, err := p.parseTuple()
			if err != nil {
				return nil, "", err
			}
			if p.cur().kind != tVarEnd {
				return nil, "", p.failf(p.cur().line, "expected end of print statement, got %s", describe(p.cur()))
			}
			p.i++
			body = append(body, &outputNode{pos{t.line}, x})
		case tBlockBegin:
			p.i++
			nt := p.cur()
			if nt.kind != tName {
				return nil, "", p.failf(nt.line, "tag name expected")
			}
			if slices.Contains(ends, nt.val) {
				p.i++
				return body, nt.val, nil
			}
			n, err := p.parseStatement()
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				body = append(body, n)
			}
		default:
			return nil, "", p.failf(t.line, "unexpected %s", describe(t))
		}
	}
}

func (p *parser) parseStatement() (node, error) {
	t := p.next()
	line := t.line
	switch t.val {
	case "if":
		return p.parseIf(line)
	case "for":
		return p.parseFor(line)
	case "set":
		return p.parseSet(line)
	case "macro":
		return p.parseMacro(line)
	case "call":
		return p.parseCallBlock(line)
	case "filter":
		filters, err := p.parseFilterChain(line)
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody([]string{"endfilter"})
		if err != nil {
			return nil, err
		}
		return &filterBlockNode{pos: pos{line}, filters: filters, body: body}, p.expectBlockEnd()
	case "generation":
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody([]string{"endgeneration"})
		if err != nil {
			return nil, err
		}
		p.hasGeneration = true
		return &generationNode{pos: pos{line}, body: body}, p.expectBlockEnd()
	case "break", "continue":
		if p.loopDepth == 0 {
			return nil, p.failf(line, "'%s' outside of a loop", t.val)
		}
		return &loopCtlNode{pos{line}, t.val == "break"}, p.expectBlockEnd()
	case "with":
		return p.parseWith(line)
	case "raw":
		return nil, p.failf(line, "malformed raw block")
	}
	return nil, p.unsupported(line, fmt.Sprintf("the '%s' tag", t.val))
}

func (p *parser) parseIf(line int) (node, error) {
	n := &ifNode{pos: pos{line}}
	for {
		// jinja2: parse_tuple(with_condexpr=False).
		cond, err := p.parseTupleNoCond()
		if err != nil {
			return nil, err
		}
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody([]string{"elif", "else", "endif"})
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectBlockEnd(); err != nil {
				return nil, err
			}
			els, _, err := p.parseBody([]string{"endif"})
			if err != nil {
				return nil, err
			}
			n.els = els
		}
		return n, p.expectBlockEnd()
	}
}

func (p *parser) parseAssignTarget(allowAttr bool) (assignTarget, error) {
	var tg assignTarget
	paren := false
	if p.isOp("(") {
		p.i++
		paren = true
	}
	for {
		name, err := p.expectName()
		if err != nil {
			return tg, err
		}
		if allowAttr && !paren && len(tg.names) == 0 && p.isOp(".") {
			p.i++
			attr, err := p.expectName()
			if err != nil {
				return tg, err
			}
			return assignTarget{names: []string{name}, attr: attr}, nil
		}
		tg.names = append(tg.names, name)
		if !p.isOp(",") {
			break
		}
		p.i++
		tg.tuple = true
		if p.cur().kind != tName {
			break
		}
	}
	if paren {
		tg.tuple = true
		if err := p.expectOp(")"); err != nil {
			return tg, err
		}
	}
	for _, n := range tg.names {
		switch n {
		case "true", "false", "none", "True", "False", "None":
			return tg, p.failf(p.cur().line, "can't assign to %q", n)
		}
	}
	return tg, nil
}

func (p *parser) parseFor(line int) (node, error) {
	tg, err := p.parseAssignTarget(false)
	if err != nil {
		return nil, err
	}
	if !p.isName("in") {
		return nil, p.failf(p.cur().line, "expected 'in', got %s", describe(p.cur()))
	}
	p.i++
	iter, err := p.parseTupleNoCond()
	if err != nil {
		return nil, err
	}
	n := &forNode{pos: pos{line}, target: tg, iter: iter}
	if p.isName("if") {
		p.i++
		if n.cond, err = p.parseExpression(true); err != nil {
			return nil, err
		}
	}
	if p.isName("recursive") {
		return nil, p.unsupported(line, "a recursive for loop")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	p.loopDepth++
	body, end, err := p.parseBody([]string{"endfor", "else"})
	p.loopDepth--
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.expectBlockEnd(); err != nil {
			return nil, err
		}
		saved := p.loopDepth
		p.loopDepth = 0
		n.els, _, err = p.parseBody([]string{"endfor"})
		p.loopDepth = saved
		if err != nil {
			return nil, err
		}
	}
	return n, p.expectBlockEnd()
}

func (p *parser) parseSet(line int) (node, error) {
	tg, err := p.parseAssignTarget(true)
	if err != nil {
		return nil, err
	}
	if p.isOp("=") {
		p.i++
		x, err := p.parseTuple()
		if err != nil {
			return nil, err
		}
		return &setNode{pos{line}, tg, x}, p.expectBlockEnd()
	}
	if tg.tuple {
		return nil, p.failf(line, "a set block assigns one name")
	}
	var filters []*filterExpr
	if p.isOp("|") {
		p.i++
		if filters, err = p.parseFilterChain(line); err != nil {
			return nil, err
		}
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	body, _, err := p.parseBody([]string{"endset"})
	if err != nil {
		return nil, err
	}
	return &setBlockNode{pos: pos{line}, target: tg, filters: filters, body: body}, p.expectBlockEnd()
}

// parseFilterChain parses "name(args) | name ..." (the first "|" already
// consumed, or absent as in {% filter %}).
func (p *parser) parseFilterChain(line int) ([]*filterExpr, error) {
	var out []*filterExpr
	for {
		f, err := p.parseFilterCall(nil)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
		if !p.isOp("|") {
			return out, nil
		}
		p.i++
	}
}

func (p *parser) parseMacroSignature(m *macroDef) error {
	if err := p.expectOp("("); err != nil {
		return err
	}
	for !p.isOp(")") {
		if len(m.params) > 0 {
			if err := p.expectOp(","); err != nil {
				return err
			}
			if p.isOp(")") {
				break
			}
		}
		name, err := p.expectName()
		if err != nil {
			return err
		}
		m.params = append(m.params, name)
		if p.isOp("=") {
			p.i++
			d, err := p.parseExpression(true)
			if err != nil {
				return err
			}
			m.defaults = append(m.defaults, d)
		} else if len(m.defaults) > 0 {
			return p.failf(p.cur().line, "non-default argument follows default argument")
		}
	}
	p.i++
	return nil
}

func (p *parser) parseMacro(line int) (node, error) {
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	m := &macroDef{name: name, line: line}
	if err := p.parseMacroSignature(m); err != nil {
		return nil, err
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	saved := p.loopDepth
	p.loopDepth = 0
	m.body, _, err = p.parseBody([]string{"endmacro"})
	p.loopDepth = saved
	if err != nil {
		return nil, err
	}
	if p.cur().kind == tName && p.cur().val == name {
		p.i++
	}
	return &macroNode{pos{line}, m}, p.expectBlockEnd()
}

func (p *parser) parseCallBlock(line int) (node, error) {
	caller := &macroDef{name: "caller", line: line}
	if p.isOp("(") {
		if err := p.parseMacroSignature(caller); err != nil {
			return nil, err
		}
	}
	x, err := p.parseExpression(true)
	if err != nil {
		return nil, err
	}
	call, ok := x.(*callExpr)
	if !ok {
		return nil, p.failf(line, "expected call")
	}
	if err := p.expectBlockEnd(); err != nil {
		return nil, err
	}
	saved := p.loopDepth
	p.loopDepth = 0
	caller.body, _, err = p.parseBody([]string{"endcall"})
	p.loopDepth = saved
	if err != nil {
		return nil, err
	}
	return &callBlockNode{pos{line}, call, caller}, p.expectBlockEnd()
}

func (p *parser) parseWith(line int) (node, error) {
	n := &withNode{pos: pos{line}}
	for p.cur().kind != tBlockEnd {
		if len(n.targets) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
		}
		tg, err := p.parseAssignTarget(false)
		if err != nil {
			return nil, err
		}
		if err := p.expectOp("="); err != nil {
			return nil, err
		}
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		n.targets = append(n.targets, tg)
		n.values = append(n.values, x)
	}
	p.i++
	body, _, err := p.parseBody([]string{"endwith"})
	if err != nil {
		return nil, err
	}
	n.body = body
	return n, p.expectBlockEnd()
}

// --- expressions, following jinja2's parser ---

func (p *parser) enter() error {
	p.depth++
	if p.depth > maxParseDepth {
		return p.failf(p.cur().line, "expression nested deeper than %d", maxParseDepth)
	}
	return nil
}

// parseTuple parses an expression or a bare tuple "a, b".
func (p *parser) parseTuple() (expr, error) { return p.parseTupleX(true) }

func (p *parser) parseTupleNoCond() (expr, error) { return p.parseTupleX(false) }

func (p *parser) parseTupleX(withCond bool) (expr, error) {
	line := p.cur().line
	var items []expr
	isTuple := false
	for {
		if len(items) > 0 {
			if !p.isOp(",") {
				break
			}
			p.i++
			isTuple = true
		}
		if p.tupleEnd() {
			break
		}
		x, err := p.parseExpression(withCond)
		if err != nil {
			return nil, err
		}
		items = append(items, x)
	}
	if !isTuple {
		if len(items) == 0 {
			return nil, p.failf(line, "expected an expression, got %s", describe(p.cur()))
		}
		return items[0], nil
	}
	return &listExpr{pos{line}, items, true}, nil
}

func (p *parser) tupleEnd() bool {
	t := p.cur()
	switch t.kind {
	case tVarEnd, tBlockEnd, tEOF:
		return true
	case tOp:
		return t.val == ")" || t.val == "]" || t.val == "}" || t.val == "="
	case tName:
		return t.val == "in" || t.val == "if" || t.val == "recursive"
	}
	return false
}

func (p *parser) parseExpression(withCond bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	if withCond {
		return p.parseCondExpr()
	}
	return p.parseOr()
}

func (p *parser) parseCondExpr() (expr, error) {
	line := p.cur().line
	x, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.isName("if") {
		p.i++
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		var els expr
		if p.isName("else") {
			p.i++
			if els, err = p.parseCondExpr(); err != nil {
				return nil, err
			}
		}
		x = &condExpr{pos{line}, cond, x, els}
	}
	return x, nil
}

func (p *parser) parseOr() (expr, error) {
	line := p.cur().line
	l, err := p.parseAnd()
	if err != nil {
		return nil, err
	}
	for p.isName("or") {
		p.i++
		r, err := p.parseAnd()
		if err != nil {
			return nil, err
		}
		l = &binExpr{pos{line}, "or", l, r}
	}
	return l, nil
}

func (p *parser) parseAnd() (expr, error) {
	line := p.cur().line
	l, err := p.parseNot()
	if err != nil {
		return nil, err
	}
	for p.isName("and") {
		p.i++
		r, err := p.parseNot()
		if err != nil {
			return nil, err
		}
		l = &binExpr{pos{line}, "and", l, r}
	}
	return l, nil
}

func (p *parser) parseNot() (expr, error) {
	if p.isName("not") {
		line := p.next().line
		if err := p.enter(); err != nil {
			return nil, err
		}
		x, err := p.parseNot()
		p.depth--
		if err != nil {
			return nil, err
		}
		return &unaryExpr{pos{line}, "not", x}, nil
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	line := p.cur().line
	x, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	c := &compareExpr{pos: pos{line}, first: x}
	for {
		t := p.cur()
		var op string
		switch {
		case t.kind == tOp && (t.val == "==" || t.val == "!=" || t.val == "<" || t.val == "<=" || t.val == ">" || t.val == ">="):
			op = t.val
			p.i++
		case t.kind == tName && t.val == "in":
			op = "in"
			p.i++
		case t.kind == tName && t.val == "not" && p.toks[p.i+1].kind == tName && p.toks[p.i+1].val == "in":
			op = "notin"
			p.i += 2
		default:
			if len(c.ops) == 0 {
				return x, nil
			}
			return c, nil
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		c.ops = append(c.ops, op)
		c.rest = append(c.rest, r)
	}
}

func (p *parser) parseMath1() (expr, error) {
	line := p.cur().line
	l, err := p.parseConcat()
	if err != nil {
		return nil, err
	}
	for p.isOp("+") || p.isOp("-") {
		op := p.next().val
		r, err := p.parseConcat()
		if err != nil {
			return nil, err
		}
		l = &binExpr{pos{line}, op, l, r}
	}
	return l, nil
}

func (p *parser) parseConcat() (expr, error) {
	line := p.cur().line
	l, err := p.parseMath2()
	if err != nil {
		return nil, err
	}
	for p.isOp("~") {
		p.i++
		r, err := p.parseMath2()
		if err != nil {
			return nil, err
		}
		l = &binExpr{pos{line}, "~", l, r}
	}
	return l, nil
}

func (p *parser) parseMath2() (expr, error) {
	line := p.cur().line
	l, err := p.parsePow()
	if err != nil {
		return nil, err
	}
	for p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%") {
		op := p.next().val
		r, err := p.parsePow()
		if err != nil {
			return nil, err
		}
		l = &binExpr{pos{line}, op, l, r}
	}
	return l, nil
}

func (p *parser) parsePow() (expr, error) {
	line := p.cur().line
	l, err := p.parseUnary(true)
	if err != nil {
		return nil, err
	}
	for p.isOp("**") {
		p.i++
		r, err := p.parseUnary(true)
		if err != nil {
			return nil, err
		}
		l = &binExpr{pos{line}, "**", l, r}
	}
	return l, nil
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	defer func() { p.depth-- }()
	line := p.cur().line
	var x expr
	var err error
	if p.isOp("-") || p.isOp("+") {
		op := p.next().val
		inner, err := p.parseUnary(false)
		if err != nil {
			return nil, err
		}
		x = &unaryExpr{pos{line}, op, inner}
	} else if x, err = p.parsePrimary(); err != nil {
		return nil, err
	}
	if x, err = p.parsePostfix(x); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilterExpr(x)
	}
	return x, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.cur()
	line := t.line
	switch t.kind {
	case tName:
		p.i++
		switch t.val {
		case "true", "True":
			return &constExpr{pos{line}, true}, nil
		case "false", "False":
			return &constExpr{pos{line}, false}, nil
		case "none", "None":
			return &constExpr{pos{line}, nil}, nil
		}
		return &nameExpr{pos{line}, t.val}, nil
	case tString:
		s := t.val
		p.i++
		for p.cur().kind == tString {
			s += p.next().val
		}
		return &constExpr{pos{line}, s}, nil
	case tInt:
		p.i++
		return &constExpr{pos{line}, t.i}, nil
	case tFloat:
		p.i++
		return &constExpr{pos{line}, t.f}, nil
	case tOp:
		switch t.val {
		case "(":
			p.i++
			if p.isOp(")") {
				p.i++
				return &listExpr{pos{line}, nil, true}, nil
			}
			x, err := p.parseTuple()
			if err != nil {
				return nil, err
			}
			return x, p.expectOp(")")
		case "[":
			p.i++
			l := &listExpr{pos: pos{line}}
			for !p.isOp("]") {
				if len(l.items) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("]") {
						break
					}
				}
				x, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, x)
			}
			p.i++
			return l, nil
		case "{":
			p.i++
			d := &dictExpr{pos: pos{line}}
			for !p.isOp("}") {
				if len(d.keys) > 0 {
					if err := p.expectOp(","); err != nil {
						return nil, err
					}
					if p.isOp("}") {
						break
					}
				}
				k, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseExpression(true)
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.vals = append(d.vals, v)
			}
			p.i++
			return d, nil
		}
	}
	return nil, p.failf(line, "unexpected %s", describe(t))
}

func (p *parser) parsePostfix(x expr) (expr, error) {
	for {
		t := p.cur()
		if t.kind != tOp {
			return x, nil
		}
		var err error
		switch t.val {
		case ".", "[":
			x, err = p.parseSubscript(x)
		case "(":
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseFilterExpr(x expr) (expr, error) {
	for {
		t := p.cur()
		var err error
		switch {
		case t.kind == tOp && t.val == "|":
			p.i++
			x, err = p.parseFilterCall(x)
		case t.kind == tName && t.val == "is":
			p.i++
			x, err = p.parseTest(x)
		case t.kind == tOp && t.val == "(":
			x, err = p.parseCall(x)
		default:
			return x, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

func (p *parser) parseSubscript(x expr) (expr, error) {
	t := p.next()
	line := t.line
	if t.val == "." {
		a := p.next()
		switch a.kind {
		case tName:
			return &attrExpr{pos{line}, x, a.val}, nil
		case tInt:
			return &itemExpr{pos{line}, x, &constExpr{pos{line}, a.i}}, nil
		}
		return nil, p.failf(line, "expected name or number after '.'")
	}
	// "[" subscript(s)
	var args []expr
	for !p.isOp("]") {
		if len(args) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, err
			}
			if p.isOp("]") {
				break
			}
		}
		a, err := p.parseSubscribed()
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	p.i++
	switch len(args) {
	case 0:
		return nil, p.failf(line, "expected a subscript")
	case 1:
		if s, ok := args[0].(*sliceExpr); ok {
			s.x = x
			return s, nil
		}
		return &itemExpr{pos{line}, x, args[0]}, nil
	}
	return nil, p.unsupported(line, "a tuple subscript")
}

func (p *parser) parseSubscribed() (expr, error) {
	line := p.cur().line
	var parts [3]expr
	if p.isOp(":") {
		p.i++
	} else {
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		if !p.isOp(":") {
			return x, nil
		}
		p.i++
		parts[0] = x
	}
	if !p.isOp("]") && !p.isOp(",") && !p.isOp(":") {
		x, err := p.parseExpression(true)
		if err != nil {
			return nil, err
		}
		parts[1] = x
	}
	if p.isOp(":") {
		p.i++
		if !p.isOp("]") && !p.isOp(",") {
			x, err := p.parseExpression(true)
			if err != nil {
				return nil, err
			}
			parts[2] = x
		}
	}
	return &sliceExpr{pos: pos{line}, start: parts[0], stop: parts[1], stp: parts[2]}, nil
}

func (p *parser) parseCallArgs() (args []expr, kwnames []string, kwvals []expr, err error) {
	if err := p.expectOp("("); err != nil {
		return nil, nil, nil, err
	}
	for !p.isOp(")") {
		if len(args)+len(kwvals) > 0 {
			if err := p.expectOp(","); err != nil {
				return nil, nil, nil, err
			}
			if p.isOp(")") {
				break
			}
		}
		if p.isOp("*") || p.isOp("**") {
			return nil, nil, nil, p.unsupported(p.cur().line, "*args/**kwargs in a call")
		}
		if p.cur().kind == tName && p.toks[p.i+1].kind == tOp && p.toks[p.i+1].val == "=" {
			name := p.next().val
			p.i++
			v, err := p.parseExpression(true)
			if err != nil {
				return nil, nil, nil, err
			}
			kwnames = append(kwnames, name)
			kwvals = append(kwvals, v)
			continue
		}
		if len(kwvals) > 0 {
			return nil, nil, nil, p.failf(p.cur().line, "positional argument follows keyword argument")
		}
		v, err := p.parseExpression(true)
		if err != nil {
			return nil, nil, nil, err
		}
		args = append(args, v)
	}
	p.i++
	return args, kwnames, kwvals, nil
}

func (p *parser) parseCall(fn expr) (expr, error) {
	line := p.cur().line
	args, kn, kv, err := p.parseCallArgs()
	if err != nil {
		return nil, err
	}
	return &callExpr{pos{line}, fn, args, kn, kv}, nil
}

func (p *parser) parseFilterCall(x expr) (*filterExpr, error) {
	line := p.cur().line
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.i++
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n
	}
	f := &filterExpr{pos: pos{line}, name: name, arg: x}
	if p.isOp("(") {
		if f.args, f.kwnames, f.kwvals, err = p.parseCallArgs(); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func (p *parser) parseTest(x expr) (expr, error) {
	line := p.cur().line
	negated := false
	if p.isName("not") {
		p.i++
		negated = true
	}
	name, err := p.expectName()
	if err != nil {
		return nil, err
	}
	for p.isOp(".") {
		p.i++
		n, err := p.expectName()
		if err != nil {
			return nil, err
		}
		name += "." + n
	}
	t := &testExpr{pos: pos{line}, name: name, arg: x, negated: negated}
	c := p.cur()
	switch {
	case c.kind == tOp && c.val == "(":
		args, kn, _, err := p.parseCallArgs()
		if err != nil {
			return nil, err
		}
		if len(kn) > 0 {
			return nil, p.unsupported(line, "keyword arguments to a test")
		}
		t.args = args
	case c.kind == tString || c.kind == tInt || c.kind == tFloat || (c.kind == tOp && (c.val == "[" || c.val == "{")) ||
		(c.kind == tName && c.val != "else" && c.val != "or" && c.val != "and"):
		if c.kind == tName && c.val == "is" {
			return nil, p.failf(line, "You cannot chain multiple tests with is")
		}
		a, err := p.parsePrimary()
		if err != nil {
			return nil, err
		}
		if a, err = p.parsePostfix(a); err != nil {
			return nil, err
		}
		t.args = []expr{a}
	}
	return t, nil
}
