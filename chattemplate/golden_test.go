package chattemplate

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
)

const testdataDir = "../testdata/chattemplate"

// pinnedNow is the clock the goldens were rendered with
// (scripts/gen-chattemplate-goldens.py, PINNED_NOW).
var pinnedNow = time.Date(2026, 1, 15, 10, 30, 45, 0, time.Local)

type corpusCase struct {
	ID   string
	Chat Chat
	// ShareGPT is the dataset's turns, when the case came from them.
	ShareGPT *List
}

func readLines(t testing.TB, path string, f func(line []byte)) {
	t.Helper()
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var r io.Reader
	if strings.HasSuffix(path, ".zst") {
		zr, err := zstd.NewReader(file, zstd.WithDecoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		defer zr.Close()
		r = zr
	} else {
		zr, err := gzip.NewReader(file)
		if err != nil {
			t.Fatal(err)
		}
		r = zr
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		f(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

func loadCorpus(t testing.TB) []corpusCase {
	var out []corpusCase
	readLines(t, filepath.Join(testdataDir, "corpus.jsonl.gz"), func(line []byte) {
		v, err := ParseJSONValue(line)
		if err != nil {
			t.Fatal(err)
		}
		d := v.(*Dict)
		get := func(k string) Value { x, _ := d.Get(k); return x }
		c := corpusCase{ID: get("id").(string)}
		c.Chat.Messages = get("messages").(*List)
		c.Chat.Tools = get("tools")
		c.Chat.AddGenerationPrompt = get("add_generation_prompt").(bool)
		c.Chat.Kwargs = map[string]Value{}
		kw := get("kwargs").(*Dict)
		for i, k := range kw.keys {
			c.Chat.Kwargs[k.(string)] = kw.vals[i]
		}
		if s, ok := get("sharegpt").(*List); ok {
			c.ShareGPT = s
		}
		out = append(out, c)
	})
	return out
}

type golden struct {
	Template string
	Case     string
	Text     *string
	Spans    [][2]int
	Error    string
}

func loadGoldens(t testing.TB) []golden {
	var out []golden
	readLines(t, filepath.Join(testdataDir, "goldens.jsonl.zst"), func(line []byte) {
		var g golden
		if err := json.Unmarshal(line, &g); err != nil {
			t.Fatal(err)
		}
		out = append(out, g)
	})
	return out
}

// trlSpecial are the special tokens TRL's templates were rendered with.
var trlSpecial = map[string]string{"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}

type loadedTemplate struct {
	t       *Template
	special map[string]string
	err     error
}

func loadTemplate(name string) loadedTemplate {
	kind, base, _ := strings.Cut(name, "/")
	if kind == "family" {
		t, sp, err := FromTokenizerDir(filepath.Join(testdataDir, "families", base), "")
		return loadedTemplate{t, sp, err}
	}
	src, err := os.ReadFile(filepath.Join(testdataDir, "trl", base+".jinja"))
	if err != nil {
		return loadedTemplate{err: err}
	}
	t, err := Parse(name, string(src))
	return loadedTemplate{t, trlSpecial, err}
}

// firstDiff describes where got and want first differ.
func firstDiff(got, want string) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	lo := max(0, i-60)
	return fmt.Sprintf("first difference at byte %d (got %d bytes, want %d):\n got: %q\nwant: %q",
		i, len(got), len(want), got[lo:min(len(got), i+60)], want[lo:min(len(want), i+60)])
}

// byteToRune converts byte offsets in s to code-point offsets.
func byteToRune(s string, off int) int { return utf8.RuneCountInString(s[:off]) }

// TestGoldens renders every corpus conversation with every template and
// compares with transformers' apply_chat_template(tokenize=False).
func TestGoldens(t *testing.T) {
	corpus := loadCorpus(t)
	byID := map[string]corpusCase{}
	for _, c := range corpus {
		byID[c.ID] = c
	}
	templates := map[string]loadedTemplate{}
	type tally struct{ pairs, same, errBoth, spans int }
	per := map[string]*tally{}
	var order []string
	for _, g := range loadGoldens(t) {
		lt, ok := templates[g.Template]
		if !ok {
			lt = loadTemplate(g.Template)
			templates[g.Template] = lt
			per[g.Template] = &tally{}
			order = append(order, g.Template)
			if lt.err != nil {
				t.Errorf("%s: %v", g.Template, lt.err)
			}
		}
		tl := per[g.Template]
		tl.pairs++
		if lt.err != nil {
			continue
		}
		c, ok := byID[g.Case]
		if !ok {
			t.Fatalf("golden case %q not in corpus", g.Case)
		}
		res, err := lt.t.Apply(c.Chat, lt.special, &Options{Now: func() time.Time { return pinnedNow }})
		if g.Text == nil {
			if err == nil {
				t.Errorf("%s × %s: transformers fails (%s), chattemplate renders %d bytes", g.Template, g.Case, g.Error, len(res.Text))
				continue
			}
			// The message must be Python's too ("TemplateError: msg" is
			// raise_exception's).
			_, wantMsg, _ := strings.Cut(g.Error, ": ")
			var e *Error
			if !errors.As(err, &e) || e.Msg != wantMsg {
				t.Errorf("%s × %s: error %v, want %s", g.Template, g.Case, err, g.Error)
				continue
			}
			if strings.HasPrefix(g.Error, "TemplateError: ") != errors.Is(err, ErrRaised) {
				t.Errorf("%s × %s: error %v, want %s", g.Template, g.Case, err, g.Error)
				continue
			}
			tl.errBoth++
			tl.same++
			continue
		}
		if err != nil {
			t.Errorf("%s × %s: %v", g.Template, g.Case, err)
			continue
		}
		if res.Text != *g.Text {
			t.Errorf("%s × %s: %s", g.Template, g.Case, firstDiff(res.Text, *g.Text))
			continue
		}
		if g.Spans != nil {
			got := make([][2]int, len(res.Generation))
			for i, s := range res.Generation {
				got[i] = [2]int{s.CharStart, s.CharEnd}
				if byteToRune(res.Text, s.Start) != s.CharStart || byteToRune(res.Text, s.End) != s.CharEnd {
					t.Errorf("%s × %s: span %v: bytes and code points disagree", g.Template, g.Case, s)
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(g.Spans) {
				t.Errorf("%s × %s: generation spans %v, want %v", g.Template, g.Case, got, g.Spans)
				continue
			}
			tl.spans++
		}
		tl.same++
	}
	// Every family and TRL template, every conversation.
	if len(order) != 12+53 {
		t.Errorf("goldens cover %d templates, want 65 (12 families, 53 TRL)", len(order))
	}
	total, same := 0, 0
	for _, name := range order {
		if per[name].pairs != len(corpus) {
			t.Errorf("%s: %d goldens, want one per conversation (%d)", name, per[name].pairs, len(corpus))
		}
		tl := per[name]
		total += tl.pairs
		same += tl.same
		t.Logf("%-40s %4d/%4d identical (%d both fail, %d with spans)", name, tl.same, tl.pairs, tl.errBoth, tl.spans)
	}
	t.Logf("all: %d/%d template×conversation pairs identical", same, total)
}
