package chattemplate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzParseRender checks that Parse and Render never panic and stay
// within their bounds on any template, with a small chat as input.
func FuzzParseRender(f *testing.F) {
	for _, s := range []string{
		"{{ messages[0]['content']|trim }}",
		"{% for m in messages %}{{ m.role }}{% if loop.last %}!{% endif %}{% endfor %}",
		"{% set ns = namespace(a=1) %}{% set ns.a = ns.a ~ 'x' %}{{ ns.a * 3 }}",
		"{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{% call f(1) %}c{% endcall %}{{ f(1, y=3) }}",
		"{%- generation -%} {{ 'a' }} {%- endgeneration %}{# c #}{% raw %}{{{% endraw %}",
		"{{ tools|tojson(indent=2) }}{{ 1.5e-7 }}{{ '%s %d'|format('a', 2) }}{{ 'ß'.upper()[::-1] }}",
		"{% filter upper %}{{ x|default('d') }}{% endfilter %}{{ [3,1]|sort|map('string')|join(',') }}",
	} {
		f.Add(s)
	}
	for _, dir := range []string{"families/qwen2.5", "families/llama3.1", "trl"} {
		paths, _ := filepath.Glob(filepath.Join(testdataDir, dir, "*"))
		for _, p := range paths {
			if b, err := os.ReadFile(p); err == nil && len(b) < 8192 {
				f.Add(string(b))
			}
		}
	}
	msgs, err := ParseJSONValue([]byte(`[{"role": "system", "content": "s"}, {"role": "user", "content": "héllo"},
		{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": 1.0}}}]}]`))
	if err != nil {
		f.Fatal(err)
	}
	opts := &Options{MaxOutput: 1 << 16, MaxSteps: 20000, MaxDepth: 20, Now: func() time.Time { return pinnedNow }}
	f.Fuzz(func(t *testing.T, src string) {
		tmpl, err := Parse("fuzz", src)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse error %v is not an *Error", err)
			}
			return
		}
		res, err := tmpl.Apply(Chat{Messages: msgs.(*List), AddGenerationPrompt: true}, map[string]string{"eos_token": "</s>"}, opts)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Render error %v is not an *Error", err)
			}
			return
		}
		if len(res.Text) > opts.MaxOutput {
			t.Fatalf("output %d bytes > %d", len(res.Text), opts.MaxOutput)
		}
		for _, s := range res.Generation {
			if s.Start < 0 || s.End < s.Start || s.End > len(res.Text) {
				t.Fatalf("span %v outside %d bytes", s, len(res.Text))
			}
		}
	})
}

// TestGenerationSpansQwen25 checks the spans of TRL's Qwen2.5 training
// template on a conversation with two assistant turns, one a tool call.
func TestGenerationSpansQwen25(t *testing.T) {
	lt := loadTemplate("trl/qwen2_5_training")
	if lt.err != nil {
		t.Fatal(lt.err)
	}
	var c corpusCase
	for _, cc := range loadCorpus(t) {
		if cc.ID == "hand/tool-call-dict-args" {
			c = cc
		}
	}
	res, err := lt.t.Apply(c.Chat, lt.special, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Generation) != 2 {
		t.Fatalf("%d spans, want 2", len(res.Generation))
	}
	first := res.Text[res.Generation[0].Start:res.Generation[0].End]
	last := res.Text[res.Generation[1].Start:res.Generation[1].End]
	if !strings.HasPrefix(first, "\n<tool_call>\n{\"name\": \"get_weather\"") || !strings.HasSuffix(first, "</tool_call><|im_end|>\n") {
		t.Errorf("first span %q", first)
	}
	if last != "\nIt is 21.5 °C and clear.<|im_end|>\n" {
		t.Errorf("last span %q", last)
	}
	if !strings.HasSuffix(res.Text[:res.Generation[1].Start], "<|im_start|>assistant") {
		t.Errorf("span does not start after the role header")
	}
}

// TestConcurrentApply renders one template and one input from many
// goroutines (run with -race): a Template and the values given to it are
// only read.
func TestConcurrentApply(t *testing.T) {
	lt := loadTemplate("family/gpt-oss")
	if lt.err != nil {
		t.Fatal(lt.err)
	}
	corpus := loadCorpus(t)
	opts := &Options{Now: func() time.Time { return pinnedNow }}
	want := make([]string, len(corpus))
	for i, c := range corpus {
		res, _ := lt.t.Apply(c.Chat, lt.special, opts)
		want[i] = res.Text
	}
	done := make(chan error)
	for g := 0; g < 4; g++ {
		go func() {
			for i, c := range corpus {
				res, _ := lt.t.Apply(c.Chat, lt.special, opts)
				if res.Text != want[i] {
					done <- fmt.Errorf("case %s differs between goroutines", c.ID)
					return
				}
			}
			done <- nil
		}()
	}
	for g := 0; g < 4; g++ {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
}
