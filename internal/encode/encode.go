package encode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// Errors, matched with errors.Is.
var (
	// ErrConfig marks a Config that New refuses.
	ErrConfig = errors.New("encode: invalid config")
	// ErrTooShort marks a MaxLen that cannot hold the template's fixed text
	// and the special ids plus one id of content.
	ErrTooShort = errors.New("encode: max length too small for the template")
)

// Chunk sizes of the work units: results are kept per chunk and joined in
// input order.
const (
	recordChunk = 128
	textChunk   = 32
)

// Config configures an Encoder. The zero value encodes with the Alpaca
// template, no special ids and no length limit.
type Config struct {
	// Template formats a record; nil means dataset.Alpaca().
	Template *dataset.Template
	// BOS and EOS are the texts the template's {bos} and {eos} stand for
	// (the seeds append tokenizer.eos_token). Default "".
	BOS, EOS string
	// AddSpecial adds the ids the tokenizer's post-processor puts around
	// every text (add_special_tokens=True). Default false.
	AddSpecial bool
	// MaxLen is the most ids of one example or text, special ids included
	// (HF's max_length). 0, the default, means no limit.
	MaxLen int
	// SplitLong cuts a record longer than MaxLen into pieces of MaxLen ids
	// instead of truncating it. Needs MaxLen. Default false.
	SplitLong bool
	// MaskPrompt sets Example.Prompt to the number of leading prompt ids;
	// otherwise it is 0. Default false.
	MaskPrompt bool
	// Pad pads each result of EncodeTexts on the right to MaxLen ids with
	// PadID (HF's padding="max_length"). Needs MaxLen. Default false.
	// Examples are padded later, by shard.Layout.
	Pad   bool
	PadID int32
}

// Encoder formats and encodes records or texts; see the package doc.
type Encoder struct {
	tok            *tokenize.Tokenizer
	c              Config
	prefix, suffix []int32 // the post-processor's ids, empty without AddSpecial
}

// Stats counts what EncodeRecords had to do to fit records into MaxLen.
type Stats struct {
	Truncated int64 // records cut to MaxLen
	Split     int64 // records split into several examples
}

// New returns an Encoder for tok.
func New(tok *tokenize.Tokenizer, c Config) (*Encoder, error) {
	switch {
	case c.MaxLen < 0:
		return nil, fmt.Errorf("%w: max length %d", ErrConfig, c.MaxLen)
	case c.SplitLong && c.MaxLen == 0:
		return nil, fmt.Errorf("%w: splitting long records needs a max length", ErrConfig)
	case c.Pad && c.MaxLen == 0:
		return nil, fmt.Errorf("%w: padding needs a max length", ErrConfig)
	}
	if c.Template == nil {
		c.Template = dataset.Alpaca()
	}
	e := &Encoder{tok: tok, c: c}
	if c.AddSpecial {
		e.prefix, e.suffix = tok.PostProcessorIDs()
	}
	return e, nil
}

// AppendText formats rec with the template and appends the text to dst. It
// returns the extended slice and the length in bytes of the prompt (the
// text before {output}) within the appended part.
func (e *Encoder) AppendText(dst []byte, rec *dataset.Record) ([]byte, int) {
	return e.c.Template.Append(dst, rec, e.c.BOS, e.c.EOS)
}

// Texts returns the formatted text of each record.
func (e *Encoder) Texts(recs []dataset.Record) []string {
	out := make([]string, len(recs))
	var b []byte
	for i := range recs {
		b, _ = e.AppendText(b[:0], &recs[i])
		out[i] = string(b)
	}
	return out
}

// FixedLen returns the number of ids of a record whose fields are all
// empty: the template's fixed text plus the special ids. EncodeRecords
// needs MaxLen > FixedLen.
func (e *Encoder) FixedLen() int {
	text, _ := e.AppendText(nil, &dataset.Record{})
	return len(e.prefix) + len(e.tok.Encode(string(text), false)) + len(e.suffix)
}

// EncodeRecords formats, encodes, masks and fits every record on workers
// goroutines and returns the examples in record order. samples[i] is the
// Example.Sample of recs[i] (nil: i). progress, when not nil, is called
// with the number of records done after each chunk, from any goroutine.
// When ctx is done it returns its cause.
func (e *Encoder) EncodeRecords(ctx context.Context, recs []dataset.Record, samples []int64, workers int, progress func(n int)) ([]shard.Example, Stats, error) {
	exs, _, st, err := e.EncodeRecordsFlags(ctx, recs, samples, workers, progress)
	return exs, st, err
}

// Flags of an example, from EncodeRecordsFlags: what fitting its record
// into MaxLen did. Stats counts records, so it is the number of examples
// with each flag.
const (
	FlagTruncated uint8 = 1 << 0 // the record was cut to MaxLen
	FlagSplit     uint8 = 1 << 1 // the first piece of a record split into several
)

// EncodeRecordsFlags is EncodeRecords that also returns each example's
// flags (FlagTruncated, FlagSplit), so that a caller that keeps only some
// of the examples can count its own Stats.
func (e *Encoder) EncodeRecordsFlags(ctx context.Context, recs []dataset.Record, samples []int64, workers int, progress func(n int)) ([]shard.Example, []uint8, Stats, error) {
	if samples != nil && len(samples) != len(recs) {
		return nil, nil, Stats{}, fmt.Errorf("%w: %d samples for %d records", ErrConfig, len(samples), len(recs))
	}
	if L := e.c.MaxLen; L > 0 {
		if n := e.FixedLen(); n >= L {
			return nil, nil, Stats{}, fmt.Errorf("%w: max length %d, template %s: its fixed text and special tokens alone take %d tokens",
				ErrTooShort, L, e.c.Template.Name, n)
		}
	}
	nchunks := (len(recs) + recordChunk - 1) / recordChunk
	out := make([][]shard.Example, nchunks)
	outFlags := make([][]uint8, nchunks)
	var truncated, split atomic.Int64
	err := Parallel(ctx, len(recs), workers, recordChunk, func(lo, hi int) error {
		var st Stats
		out[lo/recordChunk], outFlags[lo/recordChunk], st = e.chunk(recs[lo:hi], samples, lo)
		truncated.Add(st.Truncated)
		split.Add(st.Split)
		if progress != nil {
			progress(hi - lo)
		}
		return nil
	})
	if err != nil {
		return nil, nil, Stats{}, err
	}
	n := 0
	for _, ch := range out {
		n += len(ch)
	}
	exs := make([]shard.Example, 0, n)
	flags := make([]uint8, 0, n)
	for i, ch := range out {
		exs = append(exs, ch...)
		flags = append(flags, outFlags[i]...)
	}
	return exs, flags, Stats{Truncated: truncated.Load(), Split: split.Load()}, nil
}

// chunk encodes recs (the records from index first on) into one arena and
// returns their examples.
func (e *Encoder) chunk(recs []dataset.Record, samples []int64, first int) ([]shard.Example, []uint8, Stats) {
	L := e.c.MaxLen
	npre, nsuf := len(e.prefix), len(e.suffix)
	type span struct {
		start, end int
		prompt     int
		truncated  bool
	}
	spans := make([]span, len(recs))
	arena := make([]int32, 0, len(recs)*96)
	var text []byte
	var promptIDs []int32
	var st Stats
	ses := e.tok.Session()
	defer ses.Close()
	for i := range recs {
		var promptBytes int
		text, promptBytes = e.AppendText(text[:0], &recs[i])
		s := string(text)
		start := len(arena)
		arena = append(arena, e.prefix...)
		arena = ses.AppendEncode(arena, s, false)
		arena = append(arena, e.suffix...)
		prompt := 0
		if e.c.MaskPrompt {
			body := arena[start+npre : len(arena)-nsuf]
			promptIDs = ses.AppendEncode(promptIDs[:0], s[:promptBytes], false)
			k := 0
			for k < len(promptIDs) && k < len(body) && promptIDs[k] == body[k] {
				k++
			}
			prompt = npre + k
		}
		truncated := false
		if L > 0 && !e.c.SplitLong && len(arena)-start > L {
			arena = arena[:start+truncate(arena[start:], npre, nsuf, L)]
			st.Truncated++
			truncated = true
		}
		spans[i] = span{start: start, end: len(arena), prompt: prompt, truncated: truncated}
	}
	exs := make([]shard.Example, 0, len(recs))
	flags := make([]uint8, 0, len(recs))
	for i, s := range spans {
		sample := int64(first + i)
		if samples != nil {
			sample = samples[first+i]
		}
		toks := arena[s.start:s.end:s.end]
		if L == 0 || len(toks) <= L {
			exs = append(exs, shard.Example{Sample: sample, Tokens: toks, Prompt: s.prompt})
			var f uint8
			if s.truncated {
				f = FlagTruncated
			}
			flags = append(flags, f)
			continue
		}
		st.Split++
		// Pieces of L ids; each is its own example (position ids restart),
		// the prompt mask carries over.
		f := FlagSplit
		for k := 0; k < len(toks); k += L {
			end := min(k+L, len(toks))
			p := min(max(s.prompt-k, 0), end-k)
			exs = append(exs, shard.Example{Sample: sample, Tokens: toks[k:end:end], Prompt: p})
			flags = append(flags, f)
			f = 0
		}
	}
	return exs, flags, st
}

// EncodeTexts encodes texts as they are (no template) on workers goroutines,
// truncated to MaxLen as HF does and padded with Pad, and returns their ids
// in the order of texts, in memory of ar's (nil: memory of their own). When
// ctx is done it returns its cause.
func (e *Encoder) EncodeTexts(ctx context.Context, texts []string, workers int, ar *Arenas) ([][]int32, error) {
	if ar == nil {
		ar = new(Arenas)
	}
	ids := make([][]int32, len(texts))
	L := e.c.MaxLen
	need := func(s string) int { // most texts' ids fit
		n := len(s)/3 + len(e.prefix) + len(e.suffix) + 1
		if e.c.Pad {
			n = max(n, L)
		}
		return n
	}
	total := 0
	for _, s := range texts {
		total += need(s)
	}
	block := min(arenaBlock, total/max(workers, 1)+1) // a small call allocates little
	err := Parallel(ctx, len(texts), workers, textChunk, func(lo, hi int) error {
		arena := ar.get()
		ses := e.tok.Session()
		defer ses.Close()
		for i := lo; i < hi; i++ {
			if n := need(texts[i]); cap(arena)-len(arena) < n {
				arena = ar.room(n, block)
			}
			if i+1 < hi {
				ses.Prefetch(texts[i+1])
			}
			start := len(arena)
			arena = append(arena, e.prefix...)
			arena = ses.AppendEncode(arena, texts[i], false)
			arena = append(arena, e.suffix...)
			if L > 0 {
				arena = arena[:start+truncate(arena[start:], len(e.prefix), len(e.suffix), L)]
			}
			for e.c.Pad && len(arena)-start < L {
				arena = append(arena, e.c.PadID)
			}
			ids[i] = arena[start:len(arena):len(arena)]
		}
		ar.put(arena[len(arena):])
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// arenaBlock is the size in ids of EncodeTexts' arenas (1 MiB).
const arenaBlock = 1 << 18

// Arenas is the memory EncodeTexts writes ids into. Between chunks it
// holds the unused room of the call's arenas, so that a worker's chunks fill
// one arena after another, where each chunk of textChunk texts had an arena
// of its own (a small allocation, on the tokenizer's hot path, of memory
// never touched before): a fresh process encoding the 52K Alpaca prompts on
// 1 worker (the tokenize bench's run), 152.7 -> 164.2 MB/s Qwen2.5, 154.0
// -> 158.8 Llama-3.1 (medians of 10 alternating runs). A call's arenas are
// at most arenaBlock ids and at most its estimated ids per worker, so that a
// small call allocates little.
//
// A caller may keep it from one call to the next: Reuse hands all of it to
// the next call, so that a pass that encodes batch after batch (prep's
// tokenize pass: it writes a batch's ids out before it encodes the next)
// writes into memory it has touched already, where each batch's ids were
// fresh memory (its first touch is a page fault per 4 KiB, ~6 µs each on
// this VM). The zero value is ready to use. Not for concurrent calls.
type Arenas struct {
	mu   sync.Mutex
	free [][]int32
	all  [][]int32 // every arena made, for Reuse
}

// room returns a free arena with room for n ids at least, else a new one
// of room max(block, n).
func (p *Arenas) room(n, block int) []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.free) - 1; i >= 0; i-- {
		if a := p.free[i]; cap(a)-len(a) >= n {
			p.free = append(p.free[:i], p.free[i+1:]...)
			return a
		}
	}
	a := make([]int32, 0, max(block, n))
	p.all = append(p.all, a)
	return a
}

// Reuse makes all the memory of earlier EncodeTexts calls' ids room for
// the next calls. The caller must hold none of those ids.
func (p *Arenas) Reuse() {
	p.free = p.free[:0]
	for _, a := range p.all {
		p.free = append(p.free, a[:0])
	}
}

// get returns an arena with room left (the last one put), or nil.
func (p *Arenas) get() []int32 {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.free)
	if n == 0 {
		return nil
	}
	a := p.free[n-1]
	p.free = p.free[:n-1]
	return a
}

// put keeps a's room for a later chunk (a is empty: the ids before it are
// taken).
func (p *Arenas) put(a []int32) {
	if cap(a) < 1024 {
		return
	}
	p.mu.Lock()
	p.free = append(p.free, a)
	p.mu.Unlock()
}

// truncate cuts ids, which start with head and end with tail special ids,
// to at most L ids in place as HF's truncation does: the special ids are
// kept and the content between them is cut. When the special ids alone
// fill L, the first L ids are kept. It returns the new length.
func truncate(ids []int32, head, tail, L int) int {
	if len(ids) <= L {
		return len(ids)
	}
	if head+tail < L {
		copy(ids[L-tail:], ids[len(ids)-tail:])
	}
	return L
}
