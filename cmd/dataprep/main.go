// Command dataprep tokenizes an Alpaca-style dataset once and writes one
// fixed-length Arrow shard per training rank plus manifest.json (the
// format: docs/shard-format.md).
//
//	dataprep --input alpaca.json --tokenizer DIR --seq-len 1024 --ranks 16 --out DIR_OR_S3_URL
//	dataprep --part I/N [flags] --out DIR   (one part of a split run)
//	dataprep commit DIR [--parts LOC]       (lays the parts out into DIR)
//	dataprep inspect DIR [--rank R --row N]
//	dataprep tokenize --tokenizer PATH [IN.jsonl]
//	dataprep render --tokenizer DIR [IN]    (conversations through the chat template)
//	dataprep --version
//
// Exit status: 0 ok, 1 error, 2 bad usage, 130 interrupted.
package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/prep"
	"github.com/ferryml/ferry/internal/version"
)

// errUsage marks a command-line error (exit status 2); the subcommand has
// printed the message.
var errUsage = cli.ErrUsage

func main() { cli.Main(dispatch, exitCode) }

// report: usage errors are printed where they are found (with the usage),
// so exitCode prints none.
var report = cli.Report{
	Interrupt: "dataprep: interrupted; no result was written",
	Error: func(w io.Writer, err error) {
		msg := err.Error()
		if !strings.HasPrefix(msg, "dataprep") {
			msg = "dataprep: " + msg
		}
		fmt.Fprintln(w, msg)
	},
}

func exitCode(ctx context.Context, err error, stderr io.Writer) int {
	return report.Code(ctx, err, stderr)
}

func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if version.Requested(args) {
		_, err := fmt.Fprintln(stdout, version.String("dataprep"))
		return err
	}
	if len(args) > 0 {
		switch args[0] {
		case "inspect":
			return runInspect(ctx, args[1:], stdout, stderr)
		case "tokenize":
			return runTokenize(ctx, args[1:], stdin, stdout, stderr)
		case "render":
			return runRender(ctx, args[1:], stdin, stdout, stderr)
		case "commit":
			return runCommit(ctx, args[1:], stdout, stderr)
		}
	}
	return runPrep(ctx, args, stdout, stderr)
}

// configMsg is a prep.ErrConfig error's message without its prefix, as the
// commands print their own usage errors.
func configMsg(err error) string {
	return strings.TrimPrefix(err.Error(), prep.ErrConfig.Error()+": ")
}
