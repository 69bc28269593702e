package chattemplate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestErrors(t *testing.T) {
	tests := []struct {
		name    string
		src     string
		vars    map[string]Value
		opts    *Options
		wantErr error
		line    int
		msg     string // a substring of Error()
	}{
		{"unknown tag", "a\n{% include 'x.jinja' %}", nil, nil, ErrUnsupported, 2, "the 'include' tag"},
		{"extends", "{% extends 'base' %}", nil, nil, ErrUnsupported, 1, "the 'extends' tag"},
		{"recursive loop", "\n\n{% for x in y recursive %}{% endfor %}", nil, nil, ErrUnsupported, 3, "recursive for loop"},
		{"unimplemented filter", "x\ny\n{{ 'a b'|wordwrap(3) }}", nil, nil, ErrUnsupported, 3, "the filter 'wordwrap'"},
		{"unknown filter", "{{ 1|nosuch }}", nil, nil, ErrSyntax, 1, "No filter named 'nosuch'"},
		{"unknown test", "{{ 1 is nosuch }}", nil, nil, ErrSyntax, 1, "No test named 'nosuch'"},
		{"unimplemented method", "{{ 'a'.casefold() }}", nil, nil, ErrUnsupported, 1, "str.casefold"},
		{"unimplemented global", "{{ cycler(1) }}", nil, nil, ErrUnsupported, 1, "cycler"},
		{"star args", "{{ f(*xs) }}", nil, nil, ErrUnsupported, 1, "*args"},
		{"printing a generator", "{{ [1]|map('string') }}", nil, nil, ErrUnsupported, 1, "generator"},
		{"raise_exception", "ok\n{{ raise_exception('roles must alternate') }}", nil, nil, ErrRaised, 2, "raise_exception: roles must alternate"},
		{"raise in macro", "{% macro m() %}\n{{ raise_exception('deep') }}{% endmacro %}\n\n{{ m() }}", nil, nil, ErrRaised, 2, "deep"},
		{"undefined attr", "{{ x.y }}", nil, nil, ErrUndefined, 1, "'x' is undefined"},
		{"type error", "\n{{ 'a' + 1 }}", nil, nil, ErrType, 2, `can only concatenate str (not "int") to str`},
		{"syntax: unclosed if", "{% if x %}\nabc", nil, nil, ErrSyntax, 2, "expected 'elif' or 'else' or 'endif'"},
		{"syntax: unclosed tag", "{{ x ", nil, nil, ErrSyntax, 1, "missing '}}'"},
		{"syntax: bad char", "{{ x $ y }}", nil, nil, ErrSyntax, 1, "unexpected char"},
		{"syntax: unbalanced", "{{ (x] }}", nil, nil, ErrSyntax, 1, "unexpected ']'"},
		{"break outside loop", "{% break %}", nil, nil, ErrSyntax, 1, "'break' outside of a loop"},
		{"output bound", "{% for i in range(1000) %}xxxxxxxxxx{% endfor %}", nil, &Options{MaxOutput: 100}, ErrLimit, 1, "output longer than 100 bytes"},
		{"string bound", "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", nil, &Options{MaxOutput: 1000}, ErrLimit, 1, "string longer"},
		{"repeat bound", "{{ 'ab' * 100000000000 }}", nil, nil, ErrLimit, 1, "string longer"},
		{"step bound", "{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", nil, &Options{MaxSteps: 10000}, ErrLimit, 1, "more than 10000 steps"},
		{"recursion bound", "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}\n{{ m(0) }}", nil, nil, ErrLimit, 1, "macro calls nested deeper than 100"},
		{"range bound", "{{ range(1000000)|length }}", nil, nil, ErrLimit, 1, "MAX_RANGE"},
		{"parse depth", strings.Repeat("{% if x %}", 300), nil, nil, ErrSyntax, 1, "nested deeper"},
		{"expr depth", "{{ " + strings.Repeat("(", 300) + "1" + strings.Repeat(")", 300) + " }}", nil, nil, ErrSyntax, 1, "nested deeper"},
		{"unsafe method", "{{ xs.append(1) }}", map[string]Value{"xs": NewList()}, nil, ErrSecurity, 1, "unsafe"},
		{"namespace underscore", "{% set ns = namespace() %}{% set ns._x = 1 %}", nil, nil, ErrSecurity, 1, "underscore-prefixed"},
		{"int overflow", "{{ 9223372036854775807 + 1 }}", nil, nil, ErrUnsupported, 1, "64 bits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmpl, err := Parse("t.jinja", tt.src)
			if err == nil {
				_, err = tmpl.Render(tt.vars, tt.opts)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err %v is not an *Error", err)
			}
			if e.Line != tt.line || e.Template != "t.jinja" {
				t.Errorf("error at %s:%d, want t.jinja:%d (%v)", e.Template, e.Line, tt.line, err)
			}
			if !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
		})
	}
}

func TestRaiseExceptionMessage(t *testing.T) {
	tmpl, err := Parse("llama2", "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}")
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(nil, nil)
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrRaised) || e.Msg != "Conversation roles must alternate user/assistant/user/assistant/..." {
		t.Fatalf("err = %#v", err)
	}
}

func TestFromTokenizerDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	render := func(tmpl *Template, sp map[string]string) string {
		t.Helper()
		res, err := tmpl.Render(map[string]Value{"bos_token": sp["bos_token"], "eos_token": sp["eos_token"]}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return res.Text
	}
	if _, _, err := FromTokenizerDir(dir, ""); err == nil {
		t.Fatal("empty dir: no error")
	}
	// A named list in tokenizer_config.json, AddedToken special tokens.
	write("tokenizer_config.json", `{"bos_token": {"__type": "AddedToken", "content": "<s>"}, "eos_token": "</s>", "unk_token": null,
		"chat_template": [{"name": "default", "template": "D{{ bos_token }}"}, {"name": "tool_use", "template": "T{{ eos_token }}"}]}`)
	tmpl, sp, err := FromTokenizerDir(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := render(tmpl, sp); got != "D<s>" {
		t.Errorf("default: %q", got)
	}
	if _, ok := sp["unk_token"]; ok {
		t.Errorf("null unk_token loaded: %v", sp)
	}
	if sp2, err := SpecialTokens(dir); err != nil || fmt.Sprint(sp2) != fmt.Sprint(sp) {
		t.Errorf("SpecialTokens = %v, %v; want %v", sp2, err, sp)
	}
	tmpl, sp, err = FromTokenizerDir(dir, "tool_use")
	if err != nil || render(tmpl, sp) != "T</s>" {
		t.Errorf("tool_use: %v", err)
	}
	if _, _, err := FromTokenizerDir(dir, "nosuch"); err == nil || !strings.Contains(err.Error(), "default, tool_use") {
		t.Errorf("unknown name: %v", err)
	}
	// chat_template.jinja takes priority over the config.
	write("chat_template.jinja", "J{{ bos_token }}\n")
	tmpl, sp, err = FromTokenizerDir(dir, "")
	if err != nil || render(tmpl, sp) != "J<s>" {
		t.Errorf("chat_template.jinja: %v", err)
	}
	// chat_template.json when nothing else has one.
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, "chat_template.json"), []byte(`{"chat_template": "P{{ 1 + 1 }}"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	tmpl, _, err = FromTokenizerDir(dir2, "")
	if err != nil || render(tmpl, nil) != "P2" {
		t.Errorf("chat_template.json: %v", err)
	}
}

func TestNormalizeMessages(t *testing.T) {
	v, err := ParseJSONValue([]byte(`[{"role": "assistant", "content": "a", "tool_calls": null, "reasoning": "r"},
		{"role": "assistant", "content": "b", "thinking": "t0", "reasoning_content": "rc"}, {"role": "user", "content": null}]`))
	if err != nil {
		t.Fatal(err)
	}
	in := v.(*List)
	out, err := NormalizeMessages(in)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := pyRepr(out)
	want := `[{'thinking': 'r', 'role': 'assistant', 'content': 'a', 'reasoning': 'r', 'reasoning_content': 'r'}, ` +
		`{'thinking': 't0', 'role': 'assistant', 'content': 'b', 'reasoning_content': 'rc'}, {'role': 'user'}]`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if s, _ := pyRepr(in.Items[2]); s != "{'role': 'user', 'content': None}" {
		t.Errorf("input modified: %s", s)
	}
	if _, err := NormalizeMessages(NewList()); err == nil {
		t.Error("empty conversation: no error")
	}
}

// TestShareGPT checks ShareGPT against the corpus's messages, which the
// golden generator built from the same turns.
func TestShareGPT(t *testing.T) {
	n := 0
	for _, c := range loadCorpus(t) {
		if c.ShareGPT == nil {
			continue
		}
		got, err := ShareGPT(c.ShareGPT)
		if err != nil {
			t.Fatalf("%s: %v", c.ID, err)
		}
		if !pyEqual(got, c.Chat.Messages) {
			a, _ := pyRepr(got)
			b, _ := pyRepr(c.Chat.Messages)
			t.Errorf("%s:\n got %s\nwant %s", c.ID, a, b)
		}
		n++
	}
	if n < 50 {
		t.Errorf("only %d ShareGPT cases", n)
	}
}

// TestUnnormalized: transformers 4.57 hands messages to the template as
// they are; deepseek-r1's template then iterates a null tool_calls.
func TestUnnormalized(t *testing.T) {
	lt := loadTemplate("family/deepseek-r1")
	var c Chat
	for _, cc := range loadCorpus(t) {
		if cc.ID == "hand/null-keys" {
			c = cc.Chat
		}
	}
	if _, err := lt.t.Apply(c, lt.special, nil); err != nil {
		t.Fatalf("normalized: %v", err)
	}
	c.Unnormalized = true
	_, err := lt.t.Apply(c, lt.special, nil)
	var e *Error
	if !errors.As(err, &e) || e.Msg != "'NoneType' object is not iterable" {
		t.Fatalf("unnormalized: %v, want transformers 4.57's TypeError", err)
	}
}
