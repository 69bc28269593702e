package prep

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"

	"github.com/ferryml/ferry/chattemplate"
	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/tokenize"
)

// RenderConfig is a `dataprep render` run: conversations through the chat
// template, as transformers' apply_chat_template renders them.
type RenderConfig struct {
	Tokenizer           string // the model's tokenizer directory (its chat template, unless ChatTemplate)
	ChatTemplate        string // a Jinja chat template file instead of the directory's
	TemplateName        string // which of the directory's named templates ("" = "default")
	Date                string // pins strftime_now to this YYYY-MM-DD (midnight UTC); "" = the clock
	AddGenerationPrompt bool
	SkipBad             bool   // a record that cannot be read or rendered gives an error line instead of stopping
	Input               string // "" = the reader Render is given ("stdin")
}

// Validate checks c's own consistency; its errors wrap ErrConfig.
func (c *RenderConfig) Validate() error {
	switch {
	case c.Tokenizer == "":
		return configErr("--tokenizer is required")
	case c.ChatTemplate != "" && c.TemplateName != "":
		return configErr("--chat-template and --template-name exclude each other")
	}
	if c.Date != "" {
		if _, err := time.Parse(time.DateOnly, c.Date); err != nil {
			return configErr("--date %q is not YYYY-MM-DD", c.Date)
		}
	}
	return nil
}

// RenderResult is what a Render pass did.
type RenderResult struct {
	Name              string // the input's name ("stdin" for the reader)
	Template          string // the template's name
	Rendered, Skipped int
}

// renderLine is one output line of a rendered record.
type renderLine struct {
	Record   int64   `json:"record"`
	Text     string  `json:"text"`
	InputIDs []int32 `json:"input_ids"`
}

// renderBadLine is the output line of a skipped record.
type renderBadLine struct {
	Record int64  `json:"record"`
	Error  string `json:"error"`
}

// Render reads the conversations of c.Input (a JSON array, JSON Lines or
// Parquet file, local or s3://; stdin without it), renders each with the
// chat template and writes one JSON object per record and line, in record
// order: {"record": N, "text": ..., "input_ids": [...]}, the ids being the
// text's tokenization with add_special_tokens=false (what
// apply_chat_template(tokenize=True) returns). With SkipBad a record that
// cannot be read or rendered gives {"record": N, "error": ...} in its place;
// without, the first one is the error, naming the input and the record.
func Render(ctx context.Context, c RenderConfig, stdin io.Reader, stdout io.Writer) (*RenderResult, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tmpl, special, err := chatTemplate(c.Tokenizer, c.ChatTemplate, c.TemplateName)
	if err != nil {
		return nil, err
	}
	tok, err := tokenize.Load(c.Tokenizer)
	if err != nil {
		return nil, err
	}
	opts := &chattemplate.Options{}
	if c.Date != "" {
		day, _ := time.Parse(time.DateOnly, c.Date) // checked by Validate
		opts.Now = func() time.Time { return day }
	}

	var bad []*dataset.RecordError
	ropt := dataset.Options{}
	if c.SkipBad {
		ropt.OnBad = func(e *dataset.RecordError) error {
			bad = append(bad, e)
			return nil
		}
	}
	name := c.Input
	var res *dataset.ChatResult
	if name == "" {
		name = "stdin"
		raw, rerr := io.ReadAll(stdin)
		if rerr != nil {
			return nil, fmt.Errorf("stdin: %w", rerr)
		}
		res, err = dataset.ParseChat(name, raw, ropt)
	} else {
		res, err = dataset.ReadChat(ctx, name, ropt)
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].Index < bad[j].Index })

	w := bufio.NewWriterSize(stdout, 1<<20)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // the text as Python's json.dumps(ensure_ascii=False) would show it
	r := &RenderResult{Name: name, Template: tmpl.Name()}
	// the records the reader skipped go out in their place in record order
	flushBad := func(upTo int64) error {
		for len(bad) > 0 && bad[0].Index < upTo {
			if err := enc.Encode(renderBadLine{Record: bad[0].Index, Error: bad[0].Error()}); err != nil {
				return err
			}
			bad = bad[1:]
			r.Skipped++
		}
		return nil
	}
	for i, conv := range res.Records {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		idx := res.Samples[i]
		if err := flushBad(idx); err != nil {
			return nil, err
		}
		out, err := tmpl.Apply(chattemplate.Chat{Messages: conv.Messages, Tools: conv.Tools, Kwargs: conv.Kwargs,
			AddGenerationPrompt: c.AddGenerationPrompt}, special, opts)
		if err != nil {
			if !c.SkipBad {
				return nil, fmt.Errorf("%s: record %d: %w", name, idx, err)
			}
			if err := enc.Encode(renderBadLine{Record: idx, Error: err.Error()}); err != nil {
				return nil, err
			}
			r.Skipped++
			continue
		}
		ids := tok.Encode(out.Text, false)
		if ids == nil {
			ids = []int32{}
		}
		if err := enc.Encode(renderLine{Record: idx, Text: out.Text, InputIDs: ids}); err != nil {
			return nil, err
		}
		r.Rendered++
	}
	if err := flushBad(1 << 62); err != nil {
		return nil, err
	}
	if err := w.Flush(); err != nil {
		return nil, err
	}
	return r, nil
}
