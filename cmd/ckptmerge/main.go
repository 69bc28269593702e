// Command ckptmerge consolidates a sharded PyTorch distributed checkpoint
// (torch.distributed.checkpoint, as saved by FSDP, accelerate or torchtitan)
// into a Hugging Face safetensors model, streaming with bounded memory.
//
//	ckptmerge [flags] CKPT OUT
//	ckptmerge inspect [--json] CKPT
//	ckptmerge --version
//
// Exit status: 0 success, 1 error, 2 bad usage, 130 interrupted.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/version"
)

// errUsage marks a command-line mistake (exit status 2).
var errUsage = cli.Usage(errors.New("usage"))

func main() { cli.Main(dispatch, report.Code) }

var report = cli.Report{
	Usage: func(w io.Writer, err error) {
		fmt.Fprintf(w, "ckptmerge: %v\n", err)
		fmt.Fprintln(w, "run 'ckptmerge --help' for usage")
	},
	Interrupted: func(ctx context.Context, err error) bool {
		return err != nil && (cli.Interrupted(ctx) || errors.Is(err, context.Canceled))
	},
	Interrupt: "ckptmerge: interrupted; nothing was left under the output names",
	Error:     func(w io.Writer, err error) { fmt.Fprintf(w, "ckptmerge: %v\n", err) },
}

func dispatch(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if version.Requested(args) {
		_, err := fmt.Fprintln(stdout, version.String("ckptmerge"))
		return err
	}
	if len(args) > 0 && args[0] == "inspect" {
		return inspectMain(ctx, args[1:], stdout, stderr)
	}
	return mergeMain(ctx, args, stdout, stderr)
}

// runMain runs ckptmerge with args and returns its exit status.
func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return report.Code(ctx, dispatch(ctx, args, os.Stdin, stdout, stderr), stderr)
}
