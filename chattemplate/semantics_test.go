package chattemplate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSemantics checks Python/jinja2 semantics case by case against
// testdata/chattemplate/semantics.json: templates with their expected
// output or error, from transformers' own jinja2 environment
// (scripts/gen-chattemplate-goldens.py regenerates them).
func TestSemantics(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(testdataDir, "semantics.json"))
	if err != nil {
		t.Fatal(err)
	}
	all, err := ParseJSONValue(b)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range all.(*List).Items {
		d := c.(*Dict)
		src, _ := d.Get("src")
		vars := map[string]Value{}
		if vd, _ := d.Get("vars"); vd != nil {
			for j, k := range vd.(*Dict).keys {
				vars[k.(string)] = vd.(*Dict).vals[j]
			}
		}
		tmpl, err := Parse("case", src.(string))
		var res Result
		if err == nil {
			res, err = tmpl.Render(vars, &Options{Now: func() time.Time { return pinnedNow }})
		}
		if g, _ := d.Get("go"); g == "unsupported" {
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("case %d %q: got %q, %v; want ErrUnsupported", i, src, res.Text, err)
			}
			continue
		}
		if want, ok := d.Get("want"); ok {
			if err != nil {
				t.Errorf("case %d %q: %v", i, src, err)
			} else if res.Text != want.(string) {
				t.Errorf("case %d %q:\n got %q\nwant %q", i, src, res.Text, want)
			}
			continue
		}
		wantErr, _ := d.Get("err")
		typ, msg, _ := strings.Cut(wantErr.(string), ": ")
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("case %d %q: got %q, %v; want error %s", i, src, res.Text, err, wantErr)
			continue
		}
		if e.Msg != msg && typ != "TemplateSyntaxError" { // syntax messages are worded differently
			t.Errorf("case %d %q: error %q, want %q", i, src, e.Msg, msg)
		}
		kinds := map[string]error{"TemplateError": ErrRaised, "UndefinedError": ErrUndefined, "SecurityError": ErrSecurity,
			"TypeError": ErrType, "ZeroDivisionError": ErrType, "ValueError": ErrType, "IndexError": ErrType, "TemplateSyntaxError": ErrSyntax}
		if k := kinds[typ]; k == nil || !errors.Is(err, k) {
			t.Errorf("case %d %q: error %v is not the kind of %s", i, src, err, typ)
		}
	}
}
