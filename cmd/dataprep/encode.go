package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// chunkRecords is the unit of work of the tokenize stage. Results are kept
// per chunk and joined in input order, so the output does not depend on
// the number of workers.
const chunkRecords = 128

// encoder formats records with the template and tokenizes them as HF's
// tokenizer(text, truncation=True, max_length=seq_len) does: the text ids
// are cut so that they fit with the special tokens the post-processor adds
// (Llama-3: BOS first), which are kept.
type encoder struct {
	tok  *tokenize.Tokenizer
	tmpl *dataset.Template
	sp   *specials
	c    *prepConfig
}

type encStats struct {
	truncated, split int64
}

func newEncoder(tok *tokenize.Tokenizer, tmpl *dataset.Template, sp *specials, c *prepConfig) *encoder {
	return &encoder{tok: tok, tmpl: tmpl, sp: sp, c: c}
}

// checkTemplate refuses a seq_len that cannot hold the template's fixed
// text (all fields empty) plus the special tokens and one token of content.
func (e *encoder) checkTemplate() error {
	text, _ := e.tmpl.Append(nil, &dataset.Record{}, e.sp.bosText, e.sp.eos)
	n := len(e.sp.prefix) + len(e.tok.Encode(string(text), false)) + len(e.sp.suffix)
	if n >= e.c.seqLen {
		return fmt.Errorf("%w: --seq-len %d is too small for the template %s: its fixed text and special tokens alone take %d tokens",
			errUsage, e.c.seqLen, e.tmpl.Name, n)
	}
	return nil
}

// encodeAll tokenizes every record on workers goroutines.
func (e *encoder) encodeAll(ctx context.Context, res *dataset.Result, workers int, prog *progress) ([]shard.Example, encStats, error) {
	n := len(res.Records)
	nchunks := (n + chunkRecords - 1) / chunkRecords
	out := make([][]shard.Example, nchunks)
	var truncated, split atomic.Int64
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range min(workers, nchunks) {
		g.Go(func() error {
			w := &encWorker{e: e}
			for {
				ci := int(next.Add(1) - 1)
				if ci >= nchunks {
					return nil
				}
				if err := gctx.Err(); err != nil {
					return context.Cause(gctx)
				}
				lo, hi := ci*chunkRecords, min((ci+1)*chunkRecords, n)
				var st encStats
				out[ci], st = w.chunk(res.Records[lo:hi], res.Samples[lo:hi])
				truncated.Add(st.truncated)
				split.Add(st.split)
				prog.add(int64(hi - lo))
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, encStats{}, err
	}
	exs := make([]shard.Example, 0, n)
	for _, ch := range out {
		exs = append(exs, ch...)
	}
	return exs, encStats{truncated: truncated.Load(), split: split.Load()}, nil
}

type encWorker struct {
	e    *encoder
	text []byte
}

// chunk tokenizes recs into one arena and returns their examples.
func (w *encWorker) chunk(recs []dataset.Record, samples []int64) ([]shard.Example, encStats) {
	e := w.e
	L := e.c.seqLen
	pre, suf := e.sp.prefix, e.sp.suffix
	type span struct {
		start, end int
		prompt     int
		truncated  bool
	}
	spans := make([]span, len(recs))
	arena := make([]int32, 0, len(recs)*96)
	var promptIDs []int32
	for i := range recs {
		var promptBytes int
		w.text, promptBytes = e.tmpl.Append(w.text[:0], &recs[i], e.sp.bosText, e.sp.eos)
		text := string(w.text)
		start := len(arena)
		arena = append(arena, pre...)
		arena = e.tok.AppendEncode(arena, text, false)
		body := arena[start+len(pre):]
		prompt := 0
		if e.c.labels == shard.LabelsMaskPrompt {
			promptIDs = e.tok.AppendEncode(promptIDs[:0], text[:promptBytes], false)
			k := 0
			for k < len(promptIDs) && k < len(body) && promptIDs[k] == body[k] {
				k++
			}
			prompt = len(pre) + k
		}
		truncated := false
		if total := len(pre) + len(body) + len(suf); total > L && !e.c.splitLong {
			keep := L - len(pre) - len(suf) // > 0: checkTemplate
			arena = arena[:start+len(pre)+keep]
			truncated = true
		}
		arena = append(arena, suf...)
		spans[i] = span{start: start, end: len(arena), prompt: prompt, truncated: truncated}
	}
	var st encStats
	exs := make([]shard.Example, 0, len(recs))
	for i, s := range spans {
		toks := arena[s.start:s.end:s.end]
		if s.truncated {
			st.truncated++
		}
		if len(toks) <= L {
			exs = append(exs, shard.Example{Sample: samples[i], Tokens: toks, Prompt: s.prompt})
			continue
		}
		st.split++
		// --split-long: pieces of L tokens; each piece is its own example
		// (position ids restart), the prompt mask carries over.
		for k := 0; k < len(toks); k += L {
			end := min(k+L, len(toks))
			p := min(max(s.prompt-k, 0), end-k)
			exs = append(exs, shard.Example{Sample: samples[i], Tokens: toks[k:end:end], Prompt: p})
		}
	}
	return exs, st
}
