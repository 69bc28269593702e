package chattemplate

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// randomVars are the variables scripts/gen-chattemplate-goldens.py renders
// the random templates with (gen_random).
const randomVars = `{"x": "ab c", "y": " Hé llo  wörld ", "n": 5, "f": 2.5, "xs": ["b", "a", "c"], "d": {"b": 1.0, "a": [1, null]},
	"ms": {"role": "user", "content": " hi\n"}}`

// TestRandomTemplates is a differential test: 3,000 random templates and
// expressions (whitespace control, comments, raw, if/elif/else, for/else,
// break/continue, loop.*, set and set blocks in every scope, generation,
// filter, call and with blocks, macros, namespaces; Unicode case mapping,
// float printing and arithmetic) rendered by transformers' jinja2: text
// and generation spans, or its error.
func TestRandomTemplates(t *testing.T) {
	v, err := ParseJSONValue([]byte(randomVars))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]Value{"messages": NewList(), "tools": nil, "documents": nil, "add_generation_prompt": false}
	for i, k := range v.(*Dict).keys {
		vars[k.(string)] = v.(*Dict).vals[i]
	}
	kinds := map[string]error{"TemplateError": ErrRaised, "UndefinedError": ErrUndefined, "SecurityError": ErrSecurity,
		"TypeError": ErrType, "AttributeError": ErrType, "OverflowError": ErrType, "ValueError": ErrType, "ZeroDivisionError": ErrType, "TemplateSyntaxError": ErrSyntax}
	n, bad, unsupported := 0, 0, 0
	readLines(t, filepath.Join(testdataDir, "random.jsonl.gz"), func(line []byte) {
		n++
		c, err := ParseJSONValue(line)
		if err != nil {
			t.Fatal(err)
		}
		d := c.(*Dict)
		src, _ := d.Get("src")
		tmpl, err := Parse("random", src.(string))
		var res Result
		if err == nil {
			res, err = tmpl.Render(vars, nil)
		}
		fail := func(format string, args ...any) {
			bad++
			if bad <= 10 {
				t.Errorf("template %d %q: %s", n, src, fmt.Sprintf(format, args...))
			}
		}
		if errors.Is(err, ErrUnsupported) {
			unsupported++ // not implemented, and says so
			return
		}
		if want, ok := d.Get("want"); ok {
			switch {
			case err != nil:
				fail("%v", err)
			case res.Text != want.(string):
				fail("%s", firstDiff(res.Text, want.(string)))
			default:
				spans, _ := d.Get("spans")
				got := NewList()
				for _, s := range res.Generation {
					got.Items = append(got.Items, NewList(int64(s.CharStart), int64(s.CharEnd)))
				}
				if !pyEqual(got, spans) {
					fail("spans %s, want %s", mustRepr(got), mustRepr(spans))
				}
			}
			return
		}
		wantErr, _ := d.Get("err")
		typ, msg, _ := strings.Cut(wantErr.(string), ": ")
		var e *Error
		switch {
		case !errors.As(err, &e):
			fail("rendered %q, want error %s", res.Text, wantErr)
		case !errors.Is(err, kinds[typ]):
			fail("error %v, want %s", err, wantErr)
		case e.Msg != msg && typ != "TemplateSyntaxError":
			fail("error %q, want %q", e.Msg, msg)
		}
	})
	t.Logf("%d of %d random templates differ, %d not implemented", bad, n, unsupported)
	if unsupported > n/50 {
		t.Errorf("%d of %d random templates not implemented", unsupported, n)
	}
}
