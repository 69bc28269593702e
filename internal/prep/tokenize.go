package prep

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/tokenize"
)

// TokenizeConfig is a `dataprep tokenize` run: the tokenizer, the encoder's
// options and where the ids go. Its zero values are the command's defaults
// but Batch (>= 1) and Out ("" is stdout, as "-"); PadToken defaults to EOS.
type TokenizeConfig struct {
	Tokenizer string // tokenizer.json, tokenizer.json.zst or a model directory
	NoSpecial bool   // add_special_tokens=false
	Threads   int    // tokenizer goroutines (0 = GOMAXPROCS)
	Alpaca    bool   // the input is Alpaca records, formatted with the seeds' template
	EOS       string // with Alpaca: the token appended to each prompt
	MaxLength int    // truncate to N ids, the special tokens included (0 = no limit)
	Pad       bool   // with MaxLength: pad on the right to N ids with PadToken
	PadToken  string
	Batch     int    // JSONL lines read and encoded per batch
	Input     string // the input file; "" = the reader Tokenize is given ("stdin")
	Out       string // "-" or "": the writer Tokenize is given; "none": discard the ids; else a file, written atomically
	// LoadTokenizer loads the tokenizer (nil: tokenize.Load).
	LoadTokenizer func(string) (*tokenize.Tokenizer, error)
}

// Validate checks c's own consistency; its errors wrap ErrConfig.
func (c *TokenizeConfig) Validate() error {
	switch {
	case c.Tokenizer == "":
		return configErr("--tokenizer is required")
	case c.Threads < 0:
		return configErr("--threads must be >= 0")
	case c.MaxLength < 0:
		return configErr("--max-length must be >= 0")
	case c.Pad && c.MaxLength == 0:
		return configErr("--pad needs --max-length")
	case c.Batch < 1:
		return configErr("--batch must be >= 1")
	case c.Pad && c.PadToken == "" && c.EOS == "":
		return configErr("--pad needs --pad-token or --eos")
	}
	return nil
}

// TokenizeResult is what a Tokenize pass read and did.
type TokenizeResult struct {
	IDsStats
	Load    time.Duration // loading the tokenizer and opening the input and output
	Threads int           // the tokenizer goroutines used
}

// Tokenize is `dataprep tokenize`: it loads the tokenizer, builds the
// encoder and writes the ids of every text of the input (c.Input, else
// stdin) to c.Out (stdout for "-"), one {"ids": [...]} line per text (the
// IDs contract).
func Tokenize(ctx context.Context, c TokenizeConfig, stdin io.Reader, stdout io.Writer) (*TokenizeResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	load := c.LoadTokenizer
	if load == nil {
		load = tokenize.Load
	}
	tok, err := load(c.Tokenizer)
	if err != nil {
		return nil, err
	}
	padID := int32(-1)
	if c.Pad {
		padToken := c.PadToken
		if padToken == "" {
			padToken = c.EOS // the seeds set pad_token = eos_token
		}
		id, ok := tok.TokenID(padToken)
		if !ok {
			return nil, fmt.Errorf("pad token %q is not in the vocabulary of %s", padToken, c.Tokenizer)
		}
		padID = id
	}
	threads := c.Threads
	if threads == 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	enc, err := encode.New(tok, encode.Config{
		BOS: tok.Special().BOS, EOS: c.EOS, AddSpecial: !c.NoSpecial,
		MaxLen: c.MaxLength, Pad: c.Pad, PadID: padID,
	})
	if err != nil {
		return nil, err
	}
	name, in := c.Input, stdin
	if c.Input != "" {
		f, err := os.Open(c.Input)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		in = f
	} else {
		name = "stdin"
	}
	var out io.Writer
	var outFile *storage.AtomicFile // a file appears whole, or not at all
	switch c.Out {
	case "-", "":
		out = stdout
	case "none":
	default:
		if outFile, err = storage.CreateAtomic(c.Out, storage.WithOverwrite(true)); err != nil {
			return nil, err
		}
		defer outFile.Abort()
		out = outFile.File()
	}
	loadTime := time.Since(t0)
	p := &IDs{Enc: enc, Threads: threads, Name: name, Batch: c.Batch, Alpaca: c.Alpaca}
	st, err := p.Write(ctx, in, out)
	if err != nil {
		return nil, err
	}
	if outFile != nil {
		if err := outFile.Commit(ctx); err != nil {
			return nil, err
		}
	}
	return &TokenizeResult{IDsStats: *st, Load: loadTime, Threads: threads}, nil
}
