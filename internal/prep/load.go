package prep

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// loaded is what a run (or a part) read: the records, the tokenizer and
// what the configuration resolves to.
type loaded struct {
	res     *dataset.Result
	input   string // the files read, in order, as the manifest names them
	tmpl    *dataset.Template
	enc     *encode.Encoder
	tokInfo shard.TokenizerInfo
	// a part's: every input file with its size, and what the part read
	files  []string
	sizes  []int64
	pieces []dataset.PieceResult
}

// load reads the input (part i of n's share of it when n > 0) and loads
// the tokenizer at the same time, then resolves the template and special
// tokens and sets up the encoder.
func load(ctx context.Context, c *Config, i, n int) (*loaded, error) {
	in := &loaded{}
	prog := c.Progress
	var tok *tokenize.Tokenizer
	bad := &skipLog{prog: prog}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		prog.Phase("read", 0)
		opt := dataset.Options{OnBad: bad.handler(c)}
		files, err := dataset.Expand(gctx, c.Inputs)
		if err != nil {
			return err
		}
		if len(files) > 1 {
			prog.Logf("input: %d files (%s ... %s)", len(files), files[0], files[len(files)-1])
		}
		in.input = strings.Join(files, ", ") // the manifest names the files read, in order
		in.files = files
		if n == 0 {
			if in.res, err = dataset.ReadFiles(gctx, files, opt); err != nil {
				return err
			}
			return headRecords(in.res, c.MaxRecords, in.input)
		}
		pieces, sizes, err := dataset.Share(gctx, files, i, n)
		if err != nil {
			return err
		}
		in.sizes = sizes
		if in.res, in.pieces, err = dataset.ReadPieces(gctx, pieces, opt); err != nil {
			return err
		}
		headPartRecords(in.res, c.MaxRecords)
		return nil
	})
	g.Go(func() error {
		var err error
		tok, err = c.LoadTokenizer(c.Tokenizer)
		return err
	})
	// Parsing and loading do not watch ctx: on an interrupt, return at once
	// (nothing has been written yet; the goroutines end on their own).
	done := make(chan error, 1)
	go func() { done <- g.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	bad.done("bad records")
	in.tmpl = dataset.Alpaca()
	if c.TemplateFile != "" {
		b, err := os.ReadFile(c.TemplateFile)
		if err != nil {
			return nil, fmt.Errorf("template: %w", err)
		}
		if in.tmpl, err = dataset.ParseTemplate(string(b)); err != nil {
			return nil, fmt.Errorf("%s: %w", c.TemplateFile, err)
		}
	}
	sp, err := resolveSpecials(tok, c)
	if err != nil {
		return nil, err
	}
	if in.enc, err = newEncoder(tok, in.tmpl, sp, c); err != nil {
		return nil, err
	}
	in.tokInfo = tokenizerInfo(tok, sp, c.Tokenizer)
	in.tokInfo.AddBOS, in.tokInfo.AddEOS = sp.addBOS, sp.addEOS
	return in, nil
}

// specials are the resolved special tokens of a run.
type specials struct {
	eos, pad       string
	eosID, padID   int32
	bos            *string
	bosID          *int32
	bosText        string // the text {bos} stands for in a template
	addBOS, addEOS bool
}

// tokenizerInfo is the manifest's tokenizer record: its hash, resolved
// special tokens and absolute path.
func tokenizerInfo(tok *tokenize.Tokenizer, sp *specials, path string) shard.TokenizerInfo {
	if a, err := filepath.Abs(path); err == nil {
		path = a
	}
	return shard.TokenizerInfo{
		SHA256: tok.SHA256(), BOSID: sp.bosID, EOSID: &sp.eosID, PadID: sp.padID,
		EOS: &sp.eos, Pad: &sp.pad, BOS: sp.bos, Path: path,
	}
}

func resolveSpecials(tok *tokenize.Tokenizer, c *Config) (*specials, error) {
	sp := &specials{}
	ts := tok.Special()
	if c.EOS != nil {
		sp.eos = *c.EOS
	} else {
		sp.eos = ts.EOS
		if sp.eos == "" {
			return nil, configErr("the tokenizer has no eos_token; give --eos")
		}
	}
	if sp.eos != "" {
		id, ok := tok.TokenID(sp.eos)
		if !ok {
			return nil, configErr("--eos %q is not a token of %s", sp.eos, c.Tokenizer)
		}
		sp.eosID = id
	} else {
		sp.eosID = -1
	}
	if c.Pad != nil {
		sp.pad = *c.Pad
	} else {
		sp.pad = ts.Pad
		if sp.pad == "" {
			sp.pad = sp.eos
		}
	}
	if sp.pad == "" {
		return nil, configErr("no padding token: give --pad (or --eos)")
	}
	id, ok := tok.TokenID(sp.pad)
	if !ok {
		return nil, configErr("--pad %q is not a token of %s", sp.pad, c.Tokenizer)
	}
	sp.padID = id
	if ts.BOS != "" {
		b := ts.BOS
		sp.bos, sp.bosText = &b, b
		if id, ok := tok.TokenID(b); ok {
			sp.bosID = &id
		}
	}
	if !c.NoSpecial { // what the post-processor adds around every text
		sp.addBOS, sp.addEOS = ts.AddBOS, ts.AddEOS
	}
	return sp, nil
}

// newEncoder returns the encoder of a run (internal/encode does the
// formatting, truncation, split-long and prompt mask), after refusing a
// SeqLen that cannot hold the template's fixed text (all fields empty)
// plus the special tokens and one token of content.
func newEncoder(tok *tokenize.Tokenizer, tmpl *dataset.Template, sp *specials, c *Config) (*encode.Encoder, error) {
	seqLen := c.Layout.SeqLen
	enc, err := encode.New(tok, encode.Config{
		Template: tmpl, BOS: sp.bosText, EOS: sp.eos, AddSpecial: !c.NoSpecial,
		MaxLen: seqLen, SplitLong: c.SplitLong, MaskPrompt: c.Layout.Labels == shard.LabelsMaskPrompt,
	})
	if errors.Is(err, encode.ErrConfig) {
		return nil, configErr("%v", err)
	}
	if err != nil {
		return nil, err
	}
	if n := enc.FixedLen(); n >= seqLen {
		return nil, configErr("--seq-len %d is too small for the template %s: its fixed text and special tokens alone take %d tokens",
			seqLen, tmpl.Name, n)
	}
	return enc, nil
}
