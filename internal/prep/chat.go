package prep

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/ferryml/ferry/chattemplate"
	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/shard"
)

// Input formats (Config.Format).
const (
	FormatAuto   = ""       // chat when the first record has "messages" or "conversations" (or is a list of messages), else alpaca
	FormatAlpaca = "alpaca" // instruction/input/output records and a prompt template
	FormatChat   = "chat"   // conversations rendered with the model's chat template
)

// detectFormat resolves FormatAuto: the first record of the first input
// file is read as chat data (only as much of the file as it takes); a
// first record that has neither "messages" nor "conversations" makes the
// input Alpaca.
func detectFormat(ctx context.Context, files []string) string {
	if len(files) == 0 {
		return FormatAlpaca
	}
	_, err := dataset.FirstChat(ctx, files[0])
	var first *dataset.RecordError
	switch {
	case err == nil:
		return FormatChat
	case errors.As(err, &first) && first.Index == 0 && (first.Field == "messages" || first.Field == "record"):
		return FormatAlpaca
	case first != nil:
		return FormatChat // a chat record with a problem: the chat reader reports it
	}
	return FormatAlpaca
}

// chatLoaded is what a chat run (or a part) read and resolved.
type chatLoaded struct {
	convs   []dataset.Conversation
	samples []int64  // the record index of each conversation (a part's: within the part)
	files   []string // each conversation's file
	locals  []int64  // its record index within the file (a byte range's: within the range)
	skipped int64
	input   string
	format  string
	bytes   int64
	raw     int64
	tmpl    *chattemplate.Template
	text    string // the template's source
	name    string // the template's name in the manifest
	date    string
	enc     *encode.ChatEncoder
	tokInfo shard.TokenizerInfo
	// a part's: every input file with its size, and what the part read
	sizes  []int64
	pieces []dataset.PieceResult
}

// chatInfo is the manifest's record of the template and date.
func (in *chatLoaded) chatInfo() *shard.ChatInfo {
	return &shard.ChatInfo{TemplateSHA256: encode.TemplateSHA256(in.text), Date: in.date}
}

// chatTemplate is the chat template a run uses, with the tokenizer's special
// tokens (bos_token, eos_token, ...: the template's variables): the file
// (--chat-template) when given, else the tokenizer directory's template of
// that name (--template-name; "" = "default"). tokenizer is a directory or
// a tokenizer.json in one. dataprep --format chat and dataprep render both
// resolve it here.
func chatTemplate(tokenizer, file, name string) (*chattemplate.Template, map[string]string, error) {
	dir := tokenizer
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = filepath.Dir(dir)
	}
	if file == "" {
		tmpl, special, err := chattemplate.FromTokenizerDir(dir, name)
		if err != nil {
			return nil, nil, configErr("the chat template of %s: %v (give --chat-template FILE)", dir, err)
		}
		return tmpl, special, nil
	}
	src, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, configErr("--chat-template: %v", err)
	}
	special, err := chattemplate.SpecialTokens(dir)
	if err != nil {
		return nil, nil, err
	}
	tmpl, err := chattemplate.Parse(file, string(src))
	if err != nil {
		return nil, nil, configErr("--chat-template %s: %v", file, err)
	}
	return tmpl, special, nil
}

// loadChat reads the conversations of files (part i of n's share of them
// when n > 0) and loads the tokenizer and its chat template (or
// c.ChatTemplate). MaxRecords keeps the records (bad ones included) whose
// index is below it, as for Alpaca records: a part, those of its own
// records (Commit cuts the rest).
func loadChat(ctx context.Context, c *Config, files []string, i, n int) (*chatLoaded, error) {
	in := &chatLoaded{input: strings.Join(files, ", ")}
	prog := c.Progress
	bad := &skipLog{prog: prog}
	opt := dataset.Options{OnBad: bad.handler(c)}
	prog.Phase("read", 0)
	var formats []string
	add := func(res *dataset.ChatResult, f func(k int) (string, int64), base int64) {
		for k := range res.Records {
			file, local := f(k)
			in.convs = append(in.convs, res.Records[k])
			in.samples = append(in.samples, base+res.Samples[k])
			in.locals = append(in.locals, local)
			in.files = append(in.files, file)
		}
		in.skipped += res.Skipped
		in.bytes += res.Bytes
		in.raw += res.RawBytes
		if !slices.Contains(formats, string(res.Format)) {
			formats = append(formats, string(res.Format))
		}
	}
	if n == 0 {
		var base int64
		for _, f := range files {
			res, err := dataset.ReadChat(ctx, f, opt)
			if err != nil {
				return nil, err
			}
			add(res, func(k int) (string, int64) { return f, res.Samples[k] }, base)
			base += res.Skipped + int64(len(res.Records))
		}
		if m := c.MaxRecords; m > 0 {
			if base < m {
				return nil, errTooFewRecords(m, in.input, base)
			}
			keep := headSamples(in.samples, m)
			in.convs, in.samples, in.locals, in.files = in.convs[:keep], in.samples[:keep], in.locals[:keep], in.files[:keep]
			in.skipped = m - int64(keep)
		}
	} else {
		pieces, sizes, err := dataset.Share(ctx, files, i, n)
		if err != nil {
			return nil, err
		}
		res, per, err := dataset.ReadChatPieces(ctx, pieces, opt)
		if err != nil {
			return nil, err
		}
		in.sizes, in.pieces = sizes, per
		// record s of the part is in the piece whose records hold it
		starts := make([]int64, len(per)+1)
		for k, pr := range per {
			starts[k+1] = starts[k] + pr.Records
		}
		add(res, func(k int) (string, int64) {
			s := res.Samples[k]
			j, found := slices.BinarySearch(starts, s)
			if !found {
				j--
			}
			for per[j].Records == 0 { // an empty piece starts where the next does
				j++
			}
			return per[j].File, s - starts[j]
		}, 0)
		if m := c.MaxRecords; m > 0 {
			keep := headSamples(in.samples, m)
			in.convs, in.samples, in.locals, in.files = in.convs[:keep], in.samples[:keep], in.locals[:keep], in.files[:keep]
		}
	}
	in.format = strings.Join(formats, "+")
	bad.done("bad records")
	tok, err := c.LoadTokenizer(c.Tokenizer)
	if err != nil {
		return nil, err
	}
	var special map[string]string
	if in.tmpl, special, err = chatTemplate(c.Tokenizer, c.ChatTemplate, c.ChatTemplateName); err != nil {
		return nil, err
	}
	in.text, in.name = in.tmpl.Source(), in.tmpl.Name()
	now := time.Now()
	if c.Date != "" {
		day, err := time.Parse(time.DateOnly, c.Date)
		if err != nil {
			return nil, configErr("--date %q: want YYYY-MM-DD", c.Date)
		}
		now = day
	}
	in.date = now.Format(time.DateOnly)
	ids, err := encode.AddedSpecialIDs(c.Tokenizer)
	if err != nil {
		return nil, err
	}
	in.enc, err = encode.NewChat(tok, encode.ChatConfig{
		Template: in.tmpl, Special: special, Now: func() time.Time { return now },
		Labels: c.Layout.Labels, MaxLen: c.Layout.SeqLen, SplitLong: c.SplitLong, SpecialIDs: ids,
	})
	if errors.Is(err, encode.ErrConfig) {
		return nil, configErr("%v", err)
	}
	if err != nil {
		return nil, err
	}
	sp, err := resolveSpecials(tok, c)
	if err != nil {
		return nil, err
	}
	// no AddBOS/AddEOS: the chat template writes the special tokens
	in.tokInfo = tokenizerInfo(tok, sp, c.Tokenizer)
	return in, nil
}

// dropConversations lets the parsed conversations go once they are
// encoded: they are the run's largest structure (several times the input's
// size), and writing the shards needs only the examples.
func (in *chatLoaded) dropConversations() {
	in.convs, in.samples, in.files, in.locals = nil, nil, nil, nil
}

// headSamples returns how many of the ascending samples are below n.
func headSamples(samples []int64, n int64) int {
	keep, _ := slices.BinarySearch(samples, n)
	return keep
}

// runChat is Run for chat-format input.
func runChat(ctx context.Context, c Config, files []string, t0 time.Time) (*Result, error) {
	in, err := loadChat(ctx, &c, files, 0, 0)
	if err != nil {
		return nil, err
	}
	if len(in.convs) == 0 {
		return nil, fmt.Errorf("%s: no usable conversations (%d skipped)", in.input, in.skipped)
	}
	tRead := time.Now()
	c.Progress.Phase("tokenize", int64(len(in.convs)))
	bad := &skipLog{prog: c.Progress}
	onBad := bad.handler(&c)
	exs, _, st, err := in.enc.EncodeChats(ctx, in.convs, in.samples, in.files, in.locals, c.Workers, onBad, func(n int) { c.Progress.Add(int64(n)) })
	if err != nil {
		return nil, err
	}
	nconvs := int64(len(in.convs))
	in.dropConversations()
	bad.done("conversations")
	if len(exs) == 0 {
		return nil, fmt.Errorf("%s: no conversation left to train on (%d skipped, %d dropped: truncation cut every trained token)",
			in.input, in.skipped+st.Skipped, st.Dropped)
	}
	tTok := time.Now()
	skipped := in.skipped + st.Skipped
	m, err := writeShards(ctx, &c, &shardInput{
		exs: exs, tmpl: &dataset.Template{Name: in.name, Text: in.text}, tok: in.tokInfo, input: in.input,
		chat: in.chatInfo(),
		stats: shard.Stats{
			RecordsRead:      nconvs + in.skipped,
			RecordsSkipped:   skipped,
			RecordsTruncated: st.Truncated,
			RecordsSplit:     st.Split,
			RecordsDropped:   st.Dropped,
			InputBytes:       in.raw,
		},
		createdBy: createdBy(),
		seconds:   func() float64 { return time.Since(t0).Seconds() },
	})
	if err != nil {
		return nil, err
	}
	return &Result{Manifest: m, Format: "chat " + in.format, InputBytes: in.raw, Bytes: in.bytes,
		Read: tRead.Sub(t0), Tokenize: tTok.Sub(tRead), Write: time.Since(tTok)}, nil
}

// encodeChatPart reads and tokenizes part p's share of chat data.
func encodeChatPart(ctx context.Context, c *Config, files []string, p Part) (*partEncoded, error) {
	in, err := loadChat(ctx, c, files, p.I, p.N)
	if err != nil {
		return nil, err
	}
	c.Progress.Phase("tokenize", int64(len(in.convs)))
	bad := &skipLog{prog: c.Progress}
	onBad := bad.handler(c)
	exs, flags, st, err := in.enc.EncodeChats(ctx, in.convs, in.samples, in.files, in.locals, c.Workers, onBad, func(n int) { c.Progress.Add(int64(n)) })
	if err != nil {
		return nil, err
	}
	in.dropConversations()
	return &partEncoded{exs: exs, flags: flags, tokInfo: in.tokInfo, options: partOptions(c, in.name, in.text, in.chatInfo()),
		files: files, sizes: in.sizes, pieces: in.pieces, skipped: st.Skipped, truncated: st.Truncated, split: st.Split,
		dropped: st.DroppedSamples, rawBytes: in.raw, bytes: in.bytes}, nil
}
