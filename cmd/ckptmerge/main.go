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

	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/internal/version"
)

func main() {
	ctx, stop := storage.SignalContext(context.Background())
	code := runMain(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if code != 0 && storage.Interrupted(ctx) {
		code = 130
	}
	os.Exit(code)
}

// errUsage marks a command-line mistake (exit status 2).
var errUsage = errors.New("usage")

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if version.Requested(args) {
		fmt.Fprintln(stdout, version.String("ckptmerge"))
		return 0
	}
	var err error
	if len(args) > 0 && args[0] == "inspect" {
		err = inspectMain(ctx, args[1:], stdout, stderr)
	} else {
		err = mergeMain(ctx, args, stdout, stderr)
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "ckptmerge: %v\n", err)
		fmt.Fprintln(stderr, "run 'ckptmerge --help' for usage")
		return 2
	case storage.Interrupted(ctx) || errors.Is(err, context.Canceled):
		fmt.Fprintln(stderr, "ckptmerge: interrupted; nothing was left under the output names")
		return 130
	default:
		fmt.Fprintf(stderr, "ckptmerge: %v\n", err)
		return 1
	}
}
