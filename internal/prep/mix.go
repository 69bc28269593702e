package prep

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// A mixture (docs/mixtures.md) is decided once, here, from the sources'
// tokenized examples and Config.Seed alone: not from Workers, and so the
// shards (and every resume and world size reading them) hold it.
//
//	for each source, in recipe order: read, tokenize (its own format) ->
//	    records, each with its tokens (the sum over its examples)
//	planMix: uses[r] per record of each source (repeat: whole epochs plus
//	    a seeded share; weight: whole epochs plus seeded records up to
//	    the token target)
//	mixExamples: every record's examples uses[r] times, Source set ->
//	    writeShards, which packs (or pads) and shuffles them as for one input

// mixSource is one source read and tokenized.
type mixSource struct {
	spec     *RecipeSource
	format   string // alpaca or chat
	labels   shard.Labels
	input    string
	template string          // the template's name
	chat     *shard.ChatInfo // chat: the template hash and date
	tok      shard.TokenizerInfo
	exs      []shard.Example // in record order; a split record's pieces are adjacent
	stats    shard.Stats     // records read, skipped, truncated, split, dropped; input bytes
	bytes    int64           // decoded input bytes
	tokenize time.Duration   // the time in the encoder
}

// records returns the start of each record's examples in s.exs (one past
// the end last) and each record's tokens.
func (s *mixSource) records() (start []int, tokens []int64) {
	for i, e := range s.exs {
		if i == 0 || e.Sample != s.exs[i-1].Sample {
			start = append(start, i)
			tokens = append(tokens, 0)
		}
		tokens[len(tokens)-1] += int64(len(e.Tokens))
	}
	return append(start, len(s.exs)), tokens
}

// runMix is Run for c.Recipe.
func runMix(ctx context.Context, c Config, t0 time.Time) (*Result, error) {
	r, err := ReadRecipe(c.Recipe)
	if err != nil {
		return nil, err
	}
	c.LoadTokenizer = loadOnce(c.LoadTokenizer)
	srcs := make([]*mixSource, len(r.Sources))
	var rawBytes, bytes int64
	var tTok time.Duration
	for i := range r.Sources {
		s := &r.Sources[i]
		c.Progress.Logf("source %d/%d %q: %s", i+1, len(r.Sources), s.Name, strings.Join(s.Inputs, ", "))
		ms, err := readSource(ctx, &c, s)
		if err != nil {
			return nil, r.sourceErr(s, err)
		}
		if len(ms.exs) == 0 {
			return nil, r.sourceErr(s, fmt.Errorf("%s: no records to use (%d read, %d skipped, %d dropped)",
				ms.input, ms.stats.RecordsRead, ms.stats.RecordsSkipped, ms.stats.RecordsDropped))
		}
		srcs[i] = ms
		rawBytes += ms.stats.InputBytes
		bytes += ms.bytes
		tTok += ms.tokenize
	}
	tRead := time.Now()
	m, err := writeMix(ctx, &c, r, srcs, createdBy(), func() float64 { return time.Since(t0).Seconds() })
	if err != nil {
		return nil, err
	}
	return &Result{Manifest: m, Format: mixFormat(srcs), InputBytes: rawBytes, Bytes: bytes,
		Read: tRead.Sub(t0) - tTok, Tokenize: tTok, Write: time.Since(tRead)}, nil
}

// loadOnce returns load memoized: one tokenizer for every source.
func loadOnce(load func(string) (*tokenize.Tokenizer, error)) func(string) (*tokenize.Tokenizer, error) {
	var once sync.Once
	var tok *tokenize.Tokenizer
	var err error
	return func(p string) (*tokenize.Tokenizer, error) {
		once.Do(func() { tok, err = load(p) })
		return tok, err
	}
}

// mixFormat is Result.Format of a mixture: "mixture NAME:FORMAT+...".
func mixFormat(srcs []*mixSource) string {
	var fs []string
	for _, s := range srcs {
		fs = append(fs, s.spec.Name+":"+s.format)
	}
	return "mixture " + strings.Join(fs, "+")
}

// writeMix decides the mixture of the sources read (or assembled from a
// split run's parts) and writes it: the one implementation behind runMix
// and commitMix, so that both give the same bytes.
func writeMix(ctx context.Context, c *Config, r *Recipe, srcs []*mixSource, by string, seconds func() float64) (*shard.Manifest, error) {
	labels, err := mixLabels(r, srcs)
	if err != nil {
		return nil, err
	}
	c.Layout.Labels = labels
	plan, err := planMix(r, srcs, c.Seed)
	if err != nil {
		return nil, err
	}
	exs, infos := mixExamples(srcs, plan)
	// The manifest's tokenizer record: the first Alpaca source's, whose
	// add_bos/add_eos say what the post-processor added (a chat template
	// writes its own special tokens); its chat record: the first chat
	// source's (every chat source's is in its sources entry).
	in := &shardInput{
		exs: exs, tmpl: &dataset.Template{Name: "recipe", Text: r.Text}, tok: srcs[0].tok,
		input: r.Path, sources: infos, createdBy: by, seconds: seconds,
	}
	alpaca := false
	for _, s := range srcs {
		if s.chat != nil && in.chat == nil {
			in.chat = s.chat
		}
		if s.format == FormatAlpaca && !alpaca {
			in.tok, alpaca = s.tok, true
		}
		st := &in.stats
		st.RecordsRead += s.stats.RecordsRead
		st.RecordsSkipped += s.stats.RecordsSkipped
		st.RecordsTruncated += s.stats.RecordsTruncated
		st.RecordsSplit += s.stats.RecordsSplit
		st.RecordsDropped += s.stats.RecordsDropped
		st.InputBytes += s.stats.InputBytes
	}
	return writeShards(ctx, c, in)
}

// sourceConfig is c for source s: its inputs, format, template and labels
// (the source's own, else c's where they fit its format).
func sourceConfig(c *Config, s *RecipeSource) Config {
	sc := *c
	sc.Recipe = ""
	sc.Inputs = s.Inputs
	sc.MaxRecords = s.MaxRecords
	if s.Format != "" {
		sc.Format = s.Format
	}
	if s.Template != "" {
		sc.TemplateFile = s.Template
	}
	if s.ChatTemplate != "" {
		sc.ChatTemplate = s.ChatTemplate
	}
	if s.TemplateName != "" {
		sc.ChatTemplateName = s.TemplateName
	}
	sc.Layout.Labels = s.Labels
	return sc
}

// resolveSource returns the Config of source s with its format and labels
// settled, and its input files.
func resolveSource(ctx context.Context, c *Config, s *RecipeSource) (Config, []string, error) {
	sc := sourceConfig(c, s)
	files, err := dataset.Expand(ctx, sc.Inputs)
	if err != nil {
		return sc, nil, err
	}
	if sc.Format == FormatAuto && sc.ChatTemplate == "" && sc.ChatTemplateName == "" {
		sc.Format = detectFormat(ctx, files)
	} else if sc.Format == FormatAuto {
		sc.Format = FormatChat
	}
	if s.Labels == "" && c.Layout.Labels != "" && c.Layout.Labels.IsChat() == (sc.Format == FormatChat) {
		sc.Layout.Labels = c.Layout.Labels // --labels, where it is one of the source's format
	}
	if sc.Format == FormatAlpaca && (sc.ChatTemplate != "" || sc.ChatTemplateName != "") {
		sc.ChatTemplate, sc.ChatTemplateName = "", "" // --chat-template is for the chat sources
	}
	if sc.Format == FormatChat {
		sc.TemplateFile = ""
	} else {
		sc.Date = "" // --date is for the chat sources
	}
	return sc, files, sc.resolveFormat(ctx, files)
}

// readSource reads and tokenizes source s.
func readSource(ctx context.Context, c *Config, s *RecipeSource) (*mixSource, error) {
	sc, files, err := resolveSource(ctx, c, s)
	if err != nil {
		return nil, err
	}
	ms := &mixSource{spec: s, format: sc.Format, labels: sc.Layout.Labels}
	prog := func(n int) { c.Progress.Add(int64(n)) }
	if sc.Format == FormatChat {
		in, err := loadChat(ctx, &sc, files, 0, 0)
		if err != nil {
			return nil, err
		}
		var onBad func(*dataset.RecordError) error
		if sc.SkipBad {
			onBad = func(*dataset.RecordError) error { return nil }
		}
		c.Progress.Phase("tokenize", int64(len(in.convs)))
		t := time.Now()
		exs, _, st, err := in.enc.EncodeChats(ctx, in.convs, in.samples, in.files, in.locals, sc.Workers, onBad, prog)
		if err != nil {
			return nil, err
		}
		ms.tokenize = time.Since(t)
		ms.input, ms.template, ms.chat, ms.tok, ms.exs = in.input, in.name, in.chatInfo(), in.tokInfo, exs
		ms.stats = shard.Stats{RecordsRead: int64(len(in.convs)) + in.skipped, RecordsSkipped: in.skipped + st.Skipped,
			RecordsTruncated: st.Truncated, RecordsSplit: st.Split, RecordsDropped: st.Dropped, InputBytes: in.raw}
		ms.bytes = in.bytes
		return ms, nil
	}
	in, err := load(ctx, &sc, 0, 0)
	if err != nil {
		return nil, err
	}
	res := in.res
	c.Progress.Phase("tokenize", int64(len(res.Records)))
	t := time.Now()
	exs, st, err := in.enc.EncodeRecords(ctx, res.Records, res.Samples, sc.Workers, prog)
	if err != nil {
		return nil, err
	}
	ms.tokenize = time.Since(t)
	ms.input, ms.template, ms.tok, ms.exs = in.input, in.tmpl.Name, in.tokInfo, exs
	ms.stats = shard.Stats{RecordsRead: int64(len(res.Records)) + res.Skipped, RecordsSkipped: res.Skipped,
		RecordsTruncated: st.Truncated, RecordsSplit: st.Split, InputBytes: res.RawBytes}
	ms.bytes = res.Bytes
	return ms, nil
}

// mixLabels returns the output's labels policy and makes every source's
// examples carry their own policy under it. With a chat source, the
// output takes the chat sources' policy (they must agree): it gives −100
// where an example's Loss is false, so an Alpaca source under mask-prompt
// gets its prompt as Loss false. Alpaca sources alone: mask-prompt when
// any source has it (a mask-pad source's examples then have no prompt),
// else their common policy; copy (seed parity) does not mix.
func mixLabels(r *Recipe, srcs []*mixSource) (shard.Labels, error) {
	var chat *mixSource
	for _, s := range srcs {
		switch {
		case s.format == FormatChat && chat == nil:
			chat = s
		case s.format == FormatChat && s.labels != chat.labels:
			return "", configErr("%s:%d: source %q has labels %s, source %q (line %d) %s: the chat sources of one output need one policy",
				r.Path, s.spec.Line, s.spec.Name, s.labels, chat.spec.Name, chat.spec.Line, chat.labels)
		}
		if s.labels == shard.LabelsCopy && anyOther(srcs, shard.LabelsCopy) {
			return "", configErr("%s:%d: source %q has labels copy (the pads keep their labels: seed parity), which does not mix with other policies",
				r.Path, s.spec.Line, s.spec.Name)
		}
	}
	out := srcs[0].labels
	if chat != nil {
		out = chat.labels
	} else {
		for _, s := range srcs {
			if s.labels == shard.LabelsMaskPrompt {
				out = shard.LabelsMaskPrompt
			}
		}
	}
	for _, s := range srcs {
		if s.format != FormatAlpaca || s.labels == out {
			continue
		}
		for i := range s.exs {
			e := &s.exs[i]
			if s.labels == shard.LabelsMaskPrompt && e.Prompt > 0 {
				e.Loss = make([]bool, len(e.Tokens))
				for j := range e.Loss {
					e.Loss[j] = j >= e.Prompt
				}
			}
			e.Prompt = 0
		}
	}
	return out, nil
}

// anyOther reports whether a source has a policy other than l.
func anyOther(srcs []*mixSource, l shard.Labels) bool {
	for _, s := range srcs {
		if s.labels != l {
			return true
		}
	}
	return false
}

// mixPlan is what planMix decided: uses[s][k] is how often record k of
// source s goes into the output, asked[s] the source's token target.
type mixPlan struct {
	uses  [][]int32
	asked []float64
}

// mixSalt separates the mixture's draws from the row shuffle's ("mixtures").
const mixSalt = 0x6D69787475726573

// sourceSeed is the seed of source s's draws: output s+1 of
// SplitMix64(seed ^ mixSalt).
func sourceSeed(seed uint64, s int) uint64 {
	g := shard.NewRand(seed ^ mixSalt)
	var v uint64
	for range s + 1 {
		v = g.Uint64()
	}
	return v
}

// planMix decides how often each record of each source is used
// (docs/mixtures.md):
//
//   - repeat q: every record floor(q) times, and round(frac(q) × records)
//     of them, the first in a seeded permutation, once more;
//   - weight w: the source's token target is w × the output's tokens. The
//     output's tokens are R / (1 − Σw) with repeat sources (R: their
//     tokens), else the recipe's tokens, else the sources' tokens summed
//     (and the weights are normalized to sum 1). A source takes
//     floor(target / its tokens) whole epochs, then records in a seeded
//     permutation while they fit the rest of the target; the record that
//     would cross it is taken when that overshoots by no more than it
//     falls short. So each source's tokens are within half of one of its
//     records' tokens of its target.
func planMix(r *Recipe, srcs []*mixSource, seed uint64) (*mixPlan, error) {
	p := &mixPlan{uses: make([][]int32, len(srcs)), asked: make([]float64, len(srcs))}
	toks := make([][]int64, len(srcs))
	total := make([]int64, len(srcs)) // one epoch's tokens
	var repeatTokens, oneEpoch int64
	var wsum float64
	hasRepeat := false
	for i, s := range srcs {
		_, toks[i] = s.records()
		for _, t := range toks[i] {
			total[i] += t
		}
		uses := make([]int32, len(toks[i]))
		p.uses[i] = uses
		if q := s.spec.Repeat; q != nil {
			whole, frac := math.Modf(*q)
			if whole > math.MaxInt32-1 {
				return nil, configErr("%s:%d: source %q: repeat %g is too large", r.Path, s.spec.Line, s.spec.Name, *q)
			}
			extra := int(math.Round(frac * float64(len(uses))))
			perm := shard.Permutation(len(uses), sourceSeed(seed, i))
			for k := range uses {
				uses[k] = int32(whole)
			}
			for _, k := range perm[:extra] {
				uses[k]++
			}
			for k, u := range uses {
				repeatTokens += int64(u) * toks[i][k]
			}
			hasRepeat = true
			continue
		}
		wsum += *s.spec.Weight
		oneEpoch += total[i]
	}
	var out float64 // the output's tokens
	switch {
	case hasRepeat:
		out = float64(repeatTokens) / (1 - wsum)
	case r.Tokens > 0:
		out = float64(r.Tokens)
	default:
		out = float64(oneEpoch)
	}
	norm := 1.0
	if !hasRepeat {
		norm = wsum
	}
	for i, s := range srcs {
		uses := p.uses[i]
		if s.spec.Weight == nil {
			var t int64
			for k, u := range uses {
				t += int64(u) * toks[i][k]
			}
			p.asked[i] = float64(t)
			continue
		}
		target := *s.spec.Weight / norm * out
		p.asked[i] = target
		whole := math.Floor(target / float64(total[i]))
		if whole > math.MaxInt32-1 {
			return nil, configErr("%s:%d: source %q: weight %g asks for %.0f epochs of it", r.Path, s.spec.Line, s.spec.Name, *s.spec.Weight, whole)
		}
		for k := range uses {
			uses[k] = int32(whole)
		}
		rest := target - whole*float64(total[i])
		var got float64
		for _, k := range shard.Permutation(len(uses), sourceSeed(seed, i)) {
			if got >= rest {
				break
			}
			t := float64(toks[i][k])
			if got+t > rest {
				if got+t-rest <= rest-got {
					uses[k]++
				}
				break
			}
			uses[k]++
			got += t
		}
	}
	return p, nil
}

// mixExamples lays out the mixture: epoch by epoch (the records used at
// least e+1 times), source by source in recipe order, each record's
// examples in record order with Source set; and the manifest's sources.
func mixExamples(srcs []*mixSource, p *mixPlan) ([]shard.Example, []shard.SourceInfo) {
	starts := make([][]int, len(srcs))
	var maxUses int32
	n := 0
	for i, s := range srcs {
		starts[i], _ = s.records()
		for k, u := range p.uses[i] {
			maxUses = max(maxUses, u)
			n += int(u) * (starts[i][k+1] - starts[i][k])
		}
	}
	exs := make([]shard.Example, 0, n)
	infos := make([]shard.SourceInfo, len(srcs))
	for e := range maxUses {
		for i, s := range srcs {
			for k, u := range p.uses[i] {
				if u <= e {
					continue
				}
				for _, x := range s.exs[starts[i][k]:starts[i][k+1]] {
					x.Source = int32(i)
					exs = append(exs, x)
					infos[i].Examples++
					infos[i].Tokens += int64(len(x.Tokens))
				}
			}
		}
	}
	var all, asked float64
	for i := range srcs {
		all += float64(infos[i].Tokens)
		asked += p.asked[i]
	}
	for i, s := range srcs {
		in := &infos[i]
		in.Name, in.Format, in.Input, in.Labels, in.Template = s.spec.Name, s.format, s.input, s.labels, s.template
		in.Weight, in.Repeat, in.Chat = s.spec.Weight, s.spec.Repeat, s.chat
		in.RecordsRead, in.RecordsSkipped = s.stats.RecordsRead, s.stats.RecordsSkipped
		for _, u := range p.uses[i] {
			in.Uses += int64(u)
			if u > 0 {
				in.RecordsUsed++
			}
		}
		in.Repeats = float64(in.Uses) / float64(len(p.uses[i]))
		in.TokensAsked = int64(math.Round(p.asked[i]))
		if all > 0 {
			in.Share = float64(in.Tokens) / all
		}
		if asked > 0 {
			in.ShareAsked = p.asked[i] / asked
		}
	}
	return exs, infos
}
