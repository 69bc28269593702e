// Command dataprep tokenizes an Alpaca-style dataset once and writes one
// fixed-length Arrow shard per training rank plus manifest.json (the
// format: docs/shard-format.md).
//
//	dataprep --input alpaca.json --tokenizer DIR --seq-len 1024 --ranks 16 --out DIR_OR_S3_URL
//	dataprep inspect DIR [--rank R --row N]
//	dataprep tokenize --tokenizer PATH [IN.jsonl]
//	dataprep --version
//
// Exit status: 0 ok, 1 error, 2 bad usage, 130 interrupted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/internal/version"
)

// errUsage marks a command-line error (exit status 2).
var errUsage = errors.New("bad usage")

func main() {
	ctx, stop := storage.SignalContext(context.Background())
	err := dispatch(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(ctx, err, os.Stderr))
}

func exitCode(ctx context.Context, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage), errors.Is(err, errTokenizeUsage):
		return 2
	case errors.Is(context.Cause(ctx), storage.ErrInterrupted) || errors.Is(err, storage.ErrInterrupted):
		fmt.Fprintln(stderr, "dataprep: interrupted; no result was written")
		return 130
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "dataprep") {
		msg = "dataprep: " + msg
	}
	fmt.Fprintln(stderr, msg)
	return 1
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
		}
	}
	return runPrep(ctx, args, stdout, stderr)
}
