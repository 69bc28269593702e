// Command chatrender times ferry's chat-template rendering for make bench:
// every conversation of a chat file rendered with a tokenizer directory's
// template, as `dataprep render` renders it (dataset.ReadChat, then
// chattemplate's Apply with the directory's special tokens), repeated
// -repeat times.
//
//	chatrender -tokenizer DIR -date YYYY-MM-DD [-repeat N] [-out TEXTS.jsonl] FILE
//
// It prints the bench line {"bench": {"render_s": ..., "conversations": ...,
// "conv_per_s": ...}} timed around the rendering alone (not the process
// start, the template parse or the file read), and with -out writes each
// conversation's text once as {"text": ...} per line, in input order, for the
// job's check against transformers' apply_chat_template
// (bench/anchors/hf_render.py prints the same).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ferryml/ferry/chattemplate"
	"github.com/ferryml/ferry/internal/dataset"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chatrender:", err)
		os.Exit(1)
	}
}

func run() error {
	tokDir := flag.String("tokenizer", "", "tokenizer directory with the chat template")
	date := flag.String("date", "2026-07-26", "strftime_now's date, YYYY-MM-DD")
	repeat := flag.Int("repeat", 1, "render every conversation this many times")
	out := flag.String("out", "", "write the rendered texts here as JSON Lines")
	flag.Parse()
	if *tokDir == "" || flag.NArg() != 1 || *repeat < 1 {
		flag.Usage()
		return fmt.Errorf("want -tokenizer DIR and one chat file")
	}
	day, err := time.Parse(time.DateOnly, *date)
	if err != nil {
		return err
	}
	tmpl, special, err := chattemplate.FromTokenizerDir(*tokDir, "")
	if err != nil {
		return err
	}
	res, err := dataset.ReadChat(context.Background(), flag.Arg(0), dataset.Options{})
	if err != nil {
		return err
	}
	opts := &chattemplate.Options{Now: func() time.Time { return day }}
	texts := make([]string, len(res.Records))
	start := time.Now()
	for r := 0; r < *repeat; r++ {
		for i, c := range res.Records {
			o, err := tmpl.Apply(chattemplate.Chat{Messages: c.Messages, Tools: c.Tools, Kwargs: c.Kwargs}, special, opts)
			if err != nil {
				return fmt.Errorf("%s: record %d: %w", flag.Arg(0), res.Samples[i], err)
			}
			texts[i] = o.Text
		}
	}
	secs := time.Since(start).Seconds()
	if *out != "" {
		if err := writeTexts(*out, texts); err != nil {
			return err
		}
	}
	n := len(res.Records) * *repeat
	line, err := json.Marshal(map[string]any{"bench": map[string]any{
		"render_s": secs, "conversations": n, "conv_per_s": float64(n) / secs}})
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

func writeTexts(path string, texts []string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, t := range texts {
		if err := enc.Encode(map[string]string{"text": t}); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
