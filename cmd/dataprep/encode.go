package main

import (
	"errors"
	"fmt"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/encode"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// newEncoder returns the encoder of a dataprep run (internal/encode does
// the formatting, truncation, split-long and prompt mask), after refusing a
// --seq-len that cannot hold the template's fixed text (all fields empty)
// plus the special tokens and one token of content.
func newEncoder(tok *tokenize.Tokenizer, tmpl *dataset.Template, sp *specials, c *prepConfig) (*encode.Encoder, error) {
	enc, err := encode.New(tok, encode.Config{
		Template: tmpl, BOS: sp.bosText, EOS: sp.eos, AddSpecial: !c.noSpecial,
		MaxLen: c.seqLen, SplitLong: c.splitLong, MaskPrompt: c.labels == shard.LabelsMaskPrompt,
	})
	if errors.Is(err, encode.ErrConfig) {
		return nil, fmt.Errorf("%w: %v", errUsage, err)
	}
	if err != nil {
		return nil, err
	}
	if n := enc.FixedLen(); n >= c.seqLen {
		return nil, fmt.Errorf("%w: --seq-len %d is too small for the template %s: its fixed text and special tokens alone take %d tokens",
			errUsage, c.seqLen, tmpl.Name, n)
	}
	return enc, nil
}
