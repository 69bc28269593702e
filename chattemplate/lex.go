package chattemplate

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

type tokKind uint8

const (
	tData tokKind = iota
	tVarBegin
	tVarEnd
	tBlockBegin
	tBlockEnd
	tName
	tString
	tInt
	tFloat
	tOp
	tEOF
)

type token struct {
	kind tokKind
	val  string // data text, name, decoded string, operator
	i    int64
	f    float64
	line int
}

// lex splits src into tokens as jinja2's lexer does with trim_blocks and
// lstrip_blocks on: newlines normalized to "\n", one trailing newline
// dropped, "-" and "+" whitespace control, comments removed, raw blocks
// kept as data.
func lex(name, src string) ([]token, error) {
	src = strings.ReplaceAll(src, "\r\n", "\n")
	src = strings.ReplaceAll(src, "\r", "\n")
	src = strings.TrimSuffix(src, "\n")
	var toks []token
	pos, line := 0, 1
	lineStarting := true
	fail := func(line int, msg string) error {
		return &Error{Template: name, Line: line, Msg: msg, kind: ErrSyntax}
	}
	for pos < len(src) {
		// Find the next tag start.
		rest := src[pos:]
		at := -1
		for j := 0; j+1 < len(rest); j++ {
			if rest[j] == '{' && (rest[j+1] == '{' || rest[j+1] == '%' || rest[j+1] == '#') {
				at = j
				break
			}
		}
		if at < 0 {
			toks = append(toks, token{kind: tData, val: rest, line: line})
			break
		}
		text := rest[:at]
		kind := rest[at+1]
		tagStart := pos + at
		sign := byte(0)
		if tagStart+2 < len(src) && (src[tagStart+2] == '-' || src[tagStart+2] == '+') {
			sign = src[tagStart+2]
		}
		// Raw blocks: {% raw %} ... {% endraw %}.
		isRaw := false
		if kind == '%' {
			j := tagStart + 2
			if sign != 0 {
				j++
			}
			for j < len(src) && isSpace(rune(src[j])) && src[j] < 0x80 {
				j++
			}
			if strings.HasPrefix(src[j:], "raw") {
				k := j + 3
				for k < len(src) && src[k] < 0x80 && isSpace(rune(src[k])) {
					k++
				}
				if strings.HasPrefix(src[k:], "%}") || strings.HasPrefix(src[k:], "-%}") {
					isRaw = true
				}
			}
		}
		switch {
		case sign == '-':
			text = strings.TrimRightFunc(text, isSpace)
		case sign != '+' && kind != '{':
			lp := strings.LastIndexByte(text, '\n') + 1
			if lp > 0 || lineStarting {
				tail := text[lp:]
				if tail != "" && strings.TrimLeftFunc(tail, isSpace) == "" {
					text = text[:lp]
				}
			}
		}
		if text != "" {
			toks = append(toks, token{kind: tData, val: text, line: line})
		}
		line += strings.Count(rest[:at], "\n")
		pos = tagStart + 2
		if sign != 0 {
			pos++
		}
		if isRaw {
			// Skip to the end of "{% raw %}" then find "{% endraw %}".
			end := strings.Index(src[pos:], "%}")
			rawHead := src[pos : pos+end]
			pos += end + 2
			if strings.HasSuffix(rawHead, "-") {
				n := len(src[pos:]) - len(strings.TrimLeftFunc(src[pos:], isSpace))
				line += strings.Count(src[pos:pos+n], "\n")
				pos += n
			}
			body := src[pos:]
			k := 0
			found := false
			for {
				i := strings.Index(body[k:], "{%")
				if i < 0 {
					break
				}
				i += k
				j := i + 2
				s2 := byte(0)
				if j < len(body) && (body[j] == '-' || body[j] == '+') {
					s2 = body[j]
					j++
				}
				for j < len(body) && body[j] < 0x80 && isSpace(rune(body[j])) {
					j++
				}
				if strings.HasPrefix(body[j:], "endraw") {
					j += 6
					for j < len(body) && body[j] < 0x80 && isSpace(rune(body[j])) {
						j++
					}
					data := body[:i]
					if s2 == '-' {
						data = strings.TrimRightFunc(data, isSpace)
					} else if s2 != '+' {
						lp := strings.LastIndexByte(data, '\n') + 1
						if tail := data[lp:]; (lp > 0) && tail != "" && strings.TrimLeftFunc(tail, isSpace) == "" {
							data = data[:lp]
						}
					}
					toks = append(toks, token{kind: tData, val: data, line: line})
					line += strings.Count(body[:j], "\n")
					switch {
					case strings.HasPrefix(body[j:], "+%}"):
						j += 3
					case strings.HasPrefix(body[j:], "-%}"):
						j += 3
						n := len(body[j:]) - len(strings.TrimLeftFunc(body[j:], isSpace))
						line += strings.Count(body[j:j+n], "\n")
						j += n
					case strings.HasPrefix(body[j:], "%}"):
						j += 2
						if j < len(body) && body[j] == '\n' {
							j++
							line++
						}
					default:
						return nil, fail(line, "missing end of raw directive")
					}
					pos += j
					found = true
					break
				}
				k = i + 2
			}
			if !found {
				return nil, fail(line, "missing end of raw directive")
			}
			lineStarting = pos > 0 && src[pos-1] == '\n'
			continue
		}
		if kind == '#' {
			// Comment: find its end.
			i := strings.Index(src[pos:], "#}")
			if i < 0 {
				return nil, fail(line, "missing end of comment tag")
			}
			body := src[pos : pos+i]
			end := pos + i + 2
			line += strings.Count(body, "\n")
			switch {
			case strings.HasSuffix(body, "+"):
			case strings.HasSuffix(body, "-"):
				n := len(src[end:]) - len(strings.TrimLeftFunc(src[end:], isSpace))
				line += strings.Count(src[end:end+n], "\n")
				end += n
			default:
				if end < len(src) && src[end] == '\n' {
					end++
					line++
				}
			}
			pos = end
			lineStarting = src[pos-1] == '\n'
			continue
		}
		begin, endKind := tVarBegin, tVarEnd
		closer := "}}"
		if kind == '%' {
			begin, endKind, closer = tBlockBegin, tBlockEnd, "%}"
		}
		toks = append(toks, token{kind: begin, line: line})
		// Tag body.
		var stack []byte
		closed := false
		for pos < len(src) {
			c := src[pos]
			if len(stack) == 0 {
				if c == '-' && strings.HasPrefix(src[pos+1:], closer) {
					pos += 3
					n := len(src[pos:]) - len(strings.TrimLeftFunc(src[pos:], isSpace))
					toks = append(toks, token{kind: endKind, line: line})
					line += strings.Count(src[pos:pos+n], "\n")
					pos += n
					closed = true
					break
				}
				if kind == '%' && c == '+' && strings.HasPrefix(src[pos+1:], closer) {
					pos += 3
					toks = append(toks, token{kind: endKind, line: line})
					closed = true
					break
				}
				if strings.HasPrefix(src[pos:], closer) {
					pos += 2
					toks = append(toks, token{kind: endKind, line: line})
					if kind == '%' && pos < len(src) && src[pos] == '\n' {
						pos++
						line++
					}
					closed = true
					break
				}
			}
			r, size := utf8.DecodeRuneInString(src[pos:])
			switch {
			case isSpace(r):
				if r == '\n' {
					line++
				}
				pos += size
			case c >= '0' && c <= '9':
				t, n, err := lexNumber(src[pos:])
				if err != nil {
					return nil, fail(line, err.Error())
				}
				t.line = line
				toks = append(toks, t)
				pos += n
			case r == '_' || unicode.IsLetter(r):
				j := pos
				for j < len(src) {
					r2, s2 := utf8.DecodeRuneInString(src[j:])
					if r2 != '_' && !unicode.IsLetter(r2) && !unicode.IsDigit(r2) && !unicode.Is(unicode.Mn, r2) && !unicode.Is(unicode.Mc, r2) {
						break
					}
					j += s2
				}
				toks = append(toks, token{kind: tName, val: src[pos:j], line: line})
				pos = j
			case c == '\'' || c == '"':
				s, n, nl, ok := lexString(src[pos:])
				if !ok {
					return nil, fail(line, "unterminated string")
				}
				toks = append(toks, token{kind: tString, val: s, line: line})
				line += nl
				pos += n
			default:
				op := ""
				for _, o := range []string{"//", "**", "==", "!=", ">=", "<="} {
					if strings.HasPrefix(src[pos:], o) {
						op = o
						break
					}
				}
				if op == "" {
					if strings.IndexByte("+-/*%~[](){}><=.:|,;", c) < 0 {
						return nil, fail(line, "unexpected char "+strconv.QuoteRune(r))
					}
					op = src[pos : pos+1]
				}
				switch op {
				case "(", "[", "{":
					stack = append(stack, map[string]byte{"(": ')', "[": ']', "{": '}'}[op])
				case ")", "]", "}":
					if len(stack) == 0 {
						return nil, fail(line, "unexpected '"+op+"'")
					}
					if stack[len(stack)-1] != op[0] {
						return nil, fail(line, "unexpected '"+op+"', expected '"+string(stack[len(stack)-1])+"'")
					}
					stack = stack[:len(stack)-1]
				}
				toks = append(toks, token{kind: tOp, val: op, line: line})
				pos += len(op)
			}
		}
		if !closed {
			if kind == '%' {
				return nil, fail(line, "unexpected end of template: missing '%}'")
			}
			return nil, fail(line, "unexpected end of template: missing '}}'")
		}
		lineStarting = src[pos-1] == '\n'
	}
	toks = append(toks, token{kind: tEOF, line: line})
	return toks, nil
}

// lexNumber reads an integer or float literal as jinja2 does (with "_"
// separators and 0b/0o/0x prefixes).
func lexNumber(s string) (token, int, error) {
	lower := strings.ToLower(s)
	for _, p := range []struct {
		pre  string
		base int
	}{{"0b", 2}, {"0o", 8}, {"0x", 16}} {
		if strings.HasPrefix(lower, p.pre) {
			j := 2
			for j < len(s) && (s[j] == '_' || strings.ContainsRune("0123456789abcdef"[:p.base], rune(lower[j]))) {
				j++
			}
			n, err := strconv.ParseInt(strings.ReplaceAll(s[2:j], "_", ""), p.base, 64)
			if err != nil {
				return token{}, 0, err
			}
			return token{kind: tInt, i: n}, j, nil
		}
	}
	digits := func(j int) int {
		for j < len(s) && (s[j] >= '0' && s[j] <= '9' || s[j] == '_' && j+1 < len(s) && s[j+1] >= '0' && s[j+1] <= '9') {
			j++
		}
		return j
	}
	j := digits(0)
	isFloat := false
	if j+1 < len(s) && s[j] == '.' && s[j+1] >= '0' && s[j+1] <= '9' {
		j = digits(j + 1)
		isFloat = true
	}
	if j < len(s) && (s[j] == 'e' || s[j] == 'E') {
		k := j + 1
		if k < len(s) && (s[k] == '+' || s[k] == '-') {
			k++
		}
		if k < len(s) && s[k] >= '0' && s[k] <= '9' {
			j = digits(k)
			isFloat = true
		}
	}
	text := strings.ReplaceAll(s[:j], "_", "")
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil {
			return token{}, 0, err
		}
		return token{kind: tFloat, f: f}, j, nil
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return token{}, 0, err
	}
	return token{kind: tInt, i: n}, j, nil
}

// lexString reads a quoted string literal and decodes its escapes as
// Python's "unicode-escape" codec does (unknown escapes stay as written).
// It returns the value, the bytes consumed and the newlines crossed.
func lexString(s string) (string, int, int, bool) {
	q := s[0]
	j := 1
	for j < len(s) && s[j] != q {
		if s[j] == '\\' {
			j++
		}
		j++
	}
	if j >= len(s) {
		return "", 0, 0, false
	}
	raw := s[1:j]
	nl := strings.Count(raw, "\n")
	if strings.IndexByte(raw, '\\') < 0 {
		return raw, j + 1, nl, true
	}
	var b strings.Builder
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' || i+1 >= len(raw) {
			b.WriteByte(c)
			continue
		}
		i++
		switch e := raw[i]; e {
		case '\n':
		case '\\', '\'', '"':
			b.WriteByte(e)
		case 'a':
			b.WriteByte(7)
		case 'b':
			b.WriteByte(8)
		case 'f':
			b.WriteByte(12)
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		case 'v':
			b.WriteByte(11)
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if i+1+n <= len(raw) {
				if v, err := strconv.ParseUint(raw[i+1:i+1+n], 16, 32); err == nil && v <= unicode.MaxRune {
					b.WriteRune(rune(v))
					i += n
					continue
				}
			}
			b.WriteByte('\\')
			b.WriteByte(e)
		case '0', '1', '2', '3', '4', '5', '6', '7':
			k := i
			for k < len(raw) && k < i+3 && raw[k] >= '0' && raw[k] <= '7' {
				k++
			}
			v, _ := strconv.ParseUint(raw[i:k], 8, 32)
			b.WriteRune(rune(v))
			i = k - 1
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return b.String(), j + 1, nl, true
}
