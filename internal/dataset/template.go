package dataset

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// ErrTemplate marks an invalid template.
var ErrTemplate = errors.New("dataset: invalid template")

// AlpacaTemplate is the prompt of the seed workloads (and of Stanford
// Alpaca without its preamble). It is the one copy in Go: dataprep (through
// internal/encode), dataprep tokenize --alpaca and the benchmarks format
// with Alpaca().
const AlpacaTemplate = "### Instruction:\n{instruction}\n\n{?input}### Input:\n{input}\n\n{/input}### Response:\n{output}{eos}"

// Template formats a record as training text.
//
// Syntax: placeholders {instruction}, {input}, {output}, {eos} (the EOS
// token's text) and {bos}; a section {?input}…{/input} is kept only when
// input is not empty; {{ and }} are literal braces. {output} must appear
// exactly once, outside the section: the text before it is the prompt
// (no loss with --labels mask-prompt).
type Template struct {
	Name string // "alpaca", or "file:<sha256 of the text>"
	Text string
	toks []tmplTok
}

type tmplKind uint8

const (
	tLit tmplKind = iota
	tInstruction
	tInput
	tOutput
	tEOS
	tBOS
	tIfInput
	tEndInput
)

type tmplTok struct {
	kind tmplKind
	lit  string
}

// Alpaca returns the default template.
func Alpaca() *Template {
	t, err := parseTemplate("alpaca", AlpacaTemplate)
	if err != nil {
		panic(err)
	}
	return t
}

// ParseTemplate parses a user template; its name is "file:" + SHA-256.
func ParseTemplate(text string) (*Template, error) {
	sum := sha256.Sum256([]byte(text))
	return parseTemplate("file:"+hex.EncodeToString(sum[:]), text)
}

func parseTemplate(name, text string) (*Template, error) {
	t := &Template{Name: name, Text: text}
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			t.toks = append(t.toks, tmplTok{kind: tLit, lit: lit.String()})
			lit.Reset()
		}
	}
	inSection, outputs := false, 0
	for i := 0; i < len(text); {
		c := text[i]
		switch {
		case c == '{' && strings.HasPrefix(text[i:], "{{"):
			lit.WriteByte('{')
			i += 2
		case c == '}' && strings.HasPrefix(text[i:], "}}"):
			lit.WriteByte('}')
			i += 2
		case c == '{':
			end := strings.IndexByte(text[i:], '}')
			if end < 0 {
				return nil, fmt.Errorf("%w: unclosed '{' at byte %d (write {{ for a literal brace)", ErrTemplate, i)
			}
			ph := text[i+1 : i+end]
			var k tmplKind
			switch ph {
			case "instruction":
				k = tInstruction
			case "input":
				k = tInput
			case "output":
				k = tOutput
				outputs++
				if inSection {
					return nil, fmt.Errorf("%w: {output} inside {?input}…{/input}", ErrTemplate)
				}
			case "eos":
				k = tEOS
			case "bos":
				k = tBOS
			case "?input":
				if inSection {
					return nil, fmt.Errorf("%w: nested {?input} at byte %d", ErrTemplate, i)
				}
				k, inSection = tIfInput, true
			case "/input":
				if !inSection {
					return nil, fmt.Errorf("%w: {/input} without {?input} at byte %d", ErrTemplate, i)
				}
				k, inSection = tEndInput, false
			default:
				return nil, fmt.Errorf("%w: unknown placeholder {%s} at byte %d (known: instruction, input, output, eos, bos, ?input, /input)", ErrTemplate, ph, i)
			}
			flush()
			t.toks = append(t.toks, tmplTok{kind: k})
			i += end + 1
		case c == '}':
			return nil, fmt.Errorf("%w: unmatched '}' at byte %d (write }} for a literal brace)", ErrTemplate, i)
		default:
			lit.WriteByte(c)
			i++
		}
	}
	flush()
	if inSection {
		return nil, fmt.Errorf("%w: {?input} without {/input}", ErrTemplate)
	}
	if outputs != 1 {
		return nil, fmt.Errorf("%w: {output} appears %d times, want once", ErrTemplate, outputs)
	}
	return t, nil
}

// Append formats rec and appends the text to dst. It returns the extended
// slice and the length of the prompt (the text before {output}) within
// the appended part.
func (t *Template) Append(dst []byte, rec *Record, bos, eos string) ([]byte, int) {
	start := len(dst)
	prompt := -1
	skip := false
	for _, tk := range t.toks {
		if skip && tk.kind != tEndInput {
			continue
		}
		switch tk.kind {
		case tLit:
			dst = append(dst, tk.lit...)
		case tInstruction:
			dst = append(dst, rec.Instruction...)
		case tInput:
			dst = append(dst, rec.Input...)
		case tOutput:
			prompt = len(dst) - start
			dst = append(dst, rec.Output...)
		case tEOS:
			dst = append(dst, eos...)
		case tBOS:
			dst = append(dst, bos...)
		case tIfInput:
			skip = rec.Input == ""
		case tEndInput:
			skip = false
		}
	}
	return dst, prompt
}
