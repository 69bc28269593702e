package encode

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

var root = filepath.Join("..", "..")

func load(t testing.TB, path string) *tokenize.Tokenizer {
	t.Helper()
	tok, err := tokenize.Load(filepath.Join(root, path))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// records returns the tiny Alpaca fixture plus a record far longer than
// any max length below, and one with an input.
func records(t testing.TB) []dataset.Record {
	t.Helper()
	res, err := dataset.Read(context.Background(), filepath.Join(root, "testdata", "alpaca", "alpaca_tiny.json"), dataset.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return append(res.Records,
		dataset.Record{Instruction: "Repeat.", Output: strings.Repeat("many words in a row, ", 200)},
		dataset.Record{Instruction: "Add.", Input: "1 2", Output: "3"})
}

// TestEncodeRecordsContract holds EncodeRecords to the table in the package
// doc, computed here from whole-text encodes.
func TestEncodeRecordsContract(t *testing.T) {
	recs := records(t)
	for _, path := range []string{"tokenize/testdata/synthetic/gpt2", "testdata/tokenizers/llama3.1"} {
		tok := load(t, path)
		for _, c := range []Config{
			{EOS: "<|eos|>", AddSpecial: true, MaxLen: 64, MaskPrompt: true},
			{EOS: "<|eos|>", AddSpecial: true, MaxLen: 64, SplitLong: true, MaskPrompt: true},
			{EOS: "", MaxLen: 40},
			{AddSpecial: true},
		} {
			e, err := New(tok, c)
			if err != nil {
				t.Fatal(err)
			}
			exs, st, err := e.EncodeRecords(context.Background(), recs, nil, 3, nil)
			if err != nil {
				t.Fatal(err)
			}
			want, wst := reference(tok, e, c, recs)
			if st != wst {
				t.Errorf("%s %+v: stats %+v, want %+v", path, c, st, wst)
			}
			if len(exs) != len(want) {
				t.Fatalf("%s %+v: %d examples, want %d", path, c, len(exs), len(want))
			}
			for i := range exs {
				if exs[i].Sample != want[i].Sample || exs[i].Prompt != want[i].Prompt || !slices.Equal(exs[i].Tokens, want[i].Tokens) {
					t.Errorf("%s %+v: example %d = %+v, want %+v", path, c, i, exs[i], want[i])
				}
			}
		}
	}
}

// TestWorkersIdentical: the output does not depend on the number of workers,
// and samples and progress are passed through.
func TestWorkersIdentical(t *testing.T) {
	tok := load(t, "tokenize/testdata/synthetic/gpt2")
	var recs []dataset.Record
	for range 5 { // several chunks
		recs = append(recs, records(t)...)
	}
	samples := make([]int64, len(recs))
	for i := range samples {
		samples[i] = int64(10 * i)
	}
	e, err := New(tok, Config{EOS: "<|eos|>", AddSpecial: true, MaxLen: 48, SplitLong: true, MaskPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	var first []shard.Example
	for _, w := range []int{1, 2, 7} {
		var done atomic.Int64
		exs, _, err := e.EncodeRecords(context.Background(), recs, samples, w, func(n int) { done.Add(int64(n)) })
		if err != nil {
			t.Fatal(err)
		}
		if done.Load() != int64(len(recs)) {
			t.Errorf("workers %d: progress %d, want %d", w, done.Load(), len(recs))
		}
		if exs[len(exs)-1].Sample != samples[len(samples)-1] {
			t.Errorf("workers %d: last sample %d, want %d", w, exs[len(exs)-1].Sample, samples[len(samples)-1])
		}
		if first == nil {
			first = exs
		} else if !reflect.DeepEqual(exs, first) {
			t.Errorf("workers %d: examples differ from workers 1", w)
		}
	}
}

func TestEncodeTexts(t *testing.T) {
	tok := load(t, "tokenize/testdata/synthetic/gpt2") // BOS 6256 and EOS 6257 around every text
	texts := []string{"", "Hello world", strings.Repeat("many words in a row, ", 50)}
	for _, tc := range []struct {
		c    Config
		want func(ids []int32) []int32
	}{
		{Config{AddSpecial: true}, func(ids []int32) []int32 { return ids }},
		{Config{AddSpecial: true, MaxLen: 5}, func(ids []int32) []int32 {
			if len(ids) <= 5 {
				return ids
			}
			return append(ids[:4:4], ids[len(ids)-1])
		}},
		// The special ids alone fill the length: the first L ids.
		{Config{AddSpecial: true, MaxLen: 2}, func(ids []int32) []int32 { return ids[:min(2, len(ids))] }},
		{Config{AddSpecial: true, MaxLen: 6, Pad: true, PadID: 9}, func(ids []int32) []int32 {
			if len(ids) > 6 {
				return append(ids[:5:5], ids[len(ids)-1])
			}
			for len(ids) < 6 {
				ids = append(ids, 9)
			}
			return ids
		}},
		{Config{MaxLen: 3}, func(ids []int32) []int32 { return ids[:min(3, len(ids))] }},
	} {
		e, err := New(tok, tc.c)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.EncodeTexts(context.Background(), texts, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range texts {
			if want := tc.want(tok.Encode(s, tc.c.AddSpecial)); !slices.Equal(got[i], want) {
				t.Errorf("%+v: text %d: %v, want %v", tc.c, i, got[i], want)
			}
		}
	}
}

// TestEncodeTextsArenas encodes enough texts to fill several of
// EncodeTexts' shared arenas, on 1 and 3 workers, with texts of more ids
// than its estimate (rare bytes, an id each) among them: every text's ids
// are its own, and appending to one leaves the next as it is. A second call
// with the same Arenas after Reuse gives the same ids, in the memory of the
// first's (on 1 worker, it makes no arena).
func TestEncodeTextsArenas(t *testing.T) {
	tok := load(t, "tokenize/testdata/synthetic/gpt2")
	var texts []string
	for i := range 3000 {
		switch i % 7 {
		case 0:
			texts = append(texts, strings.Repeat("\x01\x7f\u00e9\u4e2d", 40+i%50))
		case 3:
			texts = append(texts, "")
		default:
			texts = append(texts, strings.Repeat("several words in a row, ", 1+i%40))
		}
	}
	for _, pad := range []bool{false, true} {
		e, err := New(tok, Config{AddSpecial: true, MaxLen: 300, Pad: pad, PadID: 9})
		if err != nil {
			t.Fatal(err)
		}
		want := make([][]int32, len(texts))
		for i, s := range texts {
			ids := tok.Encode(s, true)
			if len(ids) > 300 {
				ids = append(ids[:299:299], ids[len(ids)-1])
			}
			for pad && len(ids) < 300 {
				ids = append(ids, 9)
			}
			want[i] = ids
		}
		for _, w := range []int{1, 3} {
			var ar Arenas
			for call := range 2 {
				ar.Reuse()
				made := len(ar.all)
				got, err := e.EncodeTexts(context.Background(), texts, w, &ar)
				if err != nil {
					t.Fatal(err)
				}
				if call == 1 && w == 1 && len(ar.all) != made {
					t.Errorf("pad %v: after Reuse, the second call made %d arenas", pad, len(ar.all)-made)
				}
				for i := range texts {
					if !slices.Equal(got[i], want[i]) {
						t.Fatalf("pad %v, workers %d, call %d: text %d: %d ids, want %d", pad, w, call, i, len(got[i]), len(want[i]))
					}
				}
				for i := range got[:len(got)-1] {
					next := slices.Clone(got[i+1])
					_ = append(got[i], -1, -1, -1)
					if !slices.Equal(got[i+1], next) {
						t.Fatalf("pad %v, workers %d, call %d: appending to text %d's ids changed text %d's", pad, w, call, i, i+1)
					}
				}
			}
		}
	}
}

func TestErrors(t *testing.T) {
	tok := load(t, "tokenize/testdata/synthetic/gpt2")
	for _, c := range []Config{{MaxLen: -1}, {SplitLong: true}, {Pad: true}} {
		if _, err := New(tok, c); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v): err %v, want ErrConfig", c, err)
		}
	}
	e, err := New(tok, Config{AddSpecial: true, MaxLen: 7})
	if err != nil {
		t.Fatal(err)
	}
	if n := e.FixedLen(); n < 7 {
		t.Fatalf("FixedLen %d: the test wants a template longer than 7 ids", n)
	}
	recs := records(t)
	if _, _, err := e.EncodeRecords(context.Background(), recs, nil, 1, nil); !errors.Is(err, ErrTooShort) || !strings.Contains(err.Error(), "template alpaca") {
		t.Errorf("EncodeRecords with MaxLen 7: err %v, want ErrTooShort naming the template", err)
	}
	if _, _, err := e.EncodeRecords(context.Background(), recs, []int64{1}, 1, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("EncodeRecords with 1 sample: err %v, want ErrConfig", err)
	}
	cause := errors.New("interrupted")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	e, _ = New(tok, Config{})
	if _, _, err := e.EncodeRecords(ctx, recs, nil, 2, nil); !errors.Is(err, cause) {
		t.Errorf("EncodeRecords after cancel: err %v, want the cause", err)
	}
	if _, err := e.EncodeTexts(ctx, []string{"a"}, 2, nil); !errors.Is(err, cause) {
		t.Errorf("EncodeTexts after cancel: err %v, want the cause", err)
	}
}

func TestParallel(t *testing.T) {
	for _, n := range []int{0, 1, 31, 32, 33, 1000} {
		for _, w := range []int{0, 1, 4} {
			seen := make([]atomic.Int32, n)
			err := Parallel(context.Background(), n, w, 32, func(lo, hi int) error {
				for i := lo; i < hi; i++ {
					seen[i].Add(1)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for i := range seen {
				if seen[i].Load() != 1 {
					t.Fatalf("n %d workers %d: index %d done %d times", n, w, i, seen[i].Load())
				}
			}
		}
	}
	boom := errors.New("boom")
	var calls atomic.Int32
	err := Parallel(context.Background(), 1000, 1, 10, func(lo, hi int) error {
		calls.Add(1)
		if lo == 50 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls.Load() != 6 {
		t.Errorf("Parallel: err %v after %d calls, want boom after 6", err, calls.Load())
	}
}

// reference computes EncodeRecords' result from whole-text encodes, as the
// package doc states it.
func reference(tok *tokenize.Tokenizer, e *Encoder, c Config, recs []dataset.Record) ([]shard.Example, Stats) {
	var pre, suf []int32
	if c.AddSpecial {
		pre, suf = tok.PostProcessorIDs()
	}
	var want []shard.Example
	var wst Stats
	for i := range recs {
		text, pb := e.AppendText(nil, &recs[i])
		ids := tok.Encode(string(text), c.AddSpecial)
		prompt := 0
		if c.MaskPrompt {
			p := tok.Encode(string(text[:pb]), false)
			body := ids[len(pre) : len(ids)-len(suf)]
			for prompt < len(p) && prompt < len(body) && p[prompt] == body[prompt] {
				prompt++
			}
			prompt += len(pre)
		}
		L := c.MaxLen
		switch {
		case L == 0 || len(ids) <= L:
			want = append(want, shard.Example{Sample: int64(i), Tokens: ids, Prompt: prompt})
		case !c.SplitLong:
			wst.Truncated++
			cut := slices.Concat(ids[:L-len(suf)], ids[len(ids)-len(suf):])
			want = append(want, shard.Example{Sample: int64(i), Tokens: cut, Prompt: prompt})
		default:
			wst.Split++
			for k := 0; k < len(ids); k += L {
				end := min(k+L, len(ids))
				want = append(want, shard.Example{Sample: int64(i), Tokens: ids[k:end], Prompt: min(max(prompt-k, 0), end-k)})
			}
		}
	}
	return want, wst
}

// FuzzEncodeRecords holds EncodeRecords to the reference on arbitrary
// records and lengths.
func FuzzEncodeRecords(f *testing.F) {
	f.Add("Give three tips.", "", "1. Eat well.", uint8(16), true, true, true)
	f.Add("Add.", "1 2", "3", uint8(40), false, false, true)
	f.Add("", "", "", uint8(0), true, false, false)
	f.Add("x y z", "<|bos|>", strings.Repeat("w ", 40), uint8(20), true, true, false)
	tok := load(f, "tokenize/testdata/synthetic/gpt2")
	f.Fuzz(func(t *testing.T, ins, in, out string, maxLen uint8, special, split, mask bool) {
		c := Config{EOS: "<|eos|>", AddSpecial: special, MaxLen: int(maxLen), SplitLong: split && maxLen > 0, MaskPrompt: mask}
		e, err := New(tok, c)
		if err != nil {
			t.Fatal(err)
		}
		recs := []dataset.Record{{Instruction: ins, Input: in, Output: out}, {Instruction: out, Output: ins}}
		exs, st, err := e.EncodeRecords(context.Background(), recs, nil, 2, nil)
		if c.MaxLen > 0 && e.FixedLen() >= c.MaxLen {
			if !errors.Is(err, ErrTooShort) {
				t.Fatalf("FixedLen %d >= MaxLen %d: err %v, want ErrTooShort", e.FixedLen(), c.MaxLen, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		want, wst := reference(tok, e, c, recs)
		if st != wst || len(exs) != len(want) {
			t.Fatalf("%+v: stats %+v and %d examples, want %+v and %d", c, st, len(exs), wst, len(want))
		}
		for i := range exs {
			if exs[i].Sample != want[i].Sample || exs[i].Prompt != want[i].Prompt || !slices.Equal(exs[i].Tokens, want[i].Tokens) {
				t.Fatalf("%+v: example %d = %+v, want %+v", c, i, exs[i], want[i])
			}
		}
	})
}
