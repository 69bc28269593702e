// Command ferry-serve is the per-node feed daemon: it maps the local ranks'
// shards of a dataprep output (fetching them from S3 first when needed) and
// hands each training process its next batches in shared memory. See package
// serve for the protocol.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/version"
	"github.com/ferryml/ferry/serve"
)

const usage = `usage: ferry-serve [--data DIR|s3://BUCKET/PREFIX] [flags]
       ferry-serve --version

Serves the shards of a dataprep output to the training processes of this node
over a Unix socket; each client (python: ferry.serve_client.ServeLoader, the
same API as ferry.Loader) gets a sealed shared-memory ring of batches.
Run one per node before the trainers start; --ranks names the node's ranks.
It also serves model files to ferry.load_pretrained(model, path, serve=SOCKET):
each file (local, mounted or s3://) is read once per node into sealed shared
memory and the ranks copy their shards' bytes out of it. Without --data it
serves model files only.

Examples:
  ferry-serve --data out/alpaca --ranks 0-7 --socket /tmp/ferry.sock
  ferry-serve --data s3://bucket/alpaca --ranks 8-15 --cache-dir /local/ferry
  ferry-serve --socket /tmp/ferry.sock        # model files only

Stops cleanly on SIGTERM (exit 0) or SIGINT (exit 130): clients get a
"shutting down" error. Exit status: 0 ok, 1 error, 2 bad usage.

Flags:
`

type config struct {
	serve.Config
	Socket string
	Quiet  bool
}

func main() { cli.Main(dispatch, report.Code) }

// report: SIGTERM is the daemon's normal stop (exit 0), SIGINT exits 130;
// an error wins over either.
var report = cli.Report{
	Usage: func(w io.Writer, err error) { fmt.Fprintf(w, "ferry-serve: %v\n", err) },
	Interrupted: func(ctx context.Context, err error) bool {
		return err == nil && cli.Signal(ctx) == os.Interrupt
	},
	Error: func(w io.Writer, err error) { fmt.Fprintf(w, "ferry-serve: %v\n", err) },
}

func dispatch(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) error {
	if version.Requested(args) {
		_, err := fmt.Fprintln(stdout, version.String("ferry-serve"))
		return err
	}
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return cli.Usage(err)
	}
	return run(ctx, cfg, stderr)
}

// mainErr runs ferry-serve with args, as main does, and returns its exit
// status.
func mainErr(args []string, stderr io.Writer) int {
	return cli.Run(args, os.Stdin, os.Stdout, stderr, dispatch, report.Code)
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("ferry-serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	defSock := os.Getenv("FERRY_SERVE_SOCKET")
	if defSock == "" {
		defSock = "/tmp/ferry-serve.sock"
	}
	fs.StringVar(&cfg.Data, "data", "", "dataprep output directory or s3:// prefix (without it: model files only)")
	fs.DurationVar(&cfg.FileKeep, "file-keep", 10*time.Second, "how long a model file read for ferry.load_pretrained stays cached after its last request")
	fs.StringVar(&cfg.Socket, "socket", defSock, "Unix socket path to listen on (default $FERRY_SERVE_SOCKET)")
	ranks := fs.String("ranks", "", "shards to serve, e.g. 0-7 or 0,2,4 (default: all)")
	fs.StringVar(&cfg.CacheDir, "cache-dir", "", "directory for shards fetched from S3 (default $TMPDIR/ferry-serve-cache)")
	fs.BoolVar(&cfg.Verify, "verify", false, "check the SHA-256 of local shards at start")
	fs.Int64Var(&cfg.MaxClientBytes, "max-client-bytes", 4<<30, "largest shared-memory ring one client may ask for")
	fs.IntVar(&cfg.MaxClients, "max-clients", 1024, "most clients connected at once")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "log nothing but errors")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected argument %q (see --help)", fs.Arg(0))
	}
	var err error
	if cfg.Ranks, err = parseRanks(*ranks); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// parseRanks parses "0-3,8,10-11".
func parseRanks(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err := strconv.Atoi(lo)
		b := a
		if err == nil && isRange {
			b, err = strconv.Atoi(hi)
		}
		if err != nil || a < 0 || b < a || b-a > 1<<16 {
			return nil, fmt.Errorf("--ranks: bad element %q, want N or N-M", part)
		}
		for r := a; r <= b; r++ {
			out = append(out, r)
		}
	}
	return out, nil
}

func run(ctx context.Context, cfg config, stderr io.Writer) error {
	if !cfg.Quiet {
		cfg.Logf = func(format string, args ...any) {
			fmt.Fprintf(stderr, "ferry-serve: "+format+"\n", args...)
		}
	}
	start := time.Now()
	srv, err := serve.NewServer(ctx, cfg.Config)
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := serve.Listen(cfg.Socket)
	if err != nil {
		return err
	}
	ds := srv.Dataset()
	if !cfg.Quiet && ds != nil {
		fmt.Fprintf(stderr, "ferry-serve: serving %s (ranks %v of %d, seq_len %d) and model files on %s, ready in %.2fs\n",
			cfg.Data, ds.Served(), ds.Ranks, ds.SeqLen, cfg.Socket, time.Since(start).Seconds())
	} else if !cfg.Quiet {
		fmt.Fprintf(stderr, "ferry-serve: serving model files on %s, ready in %.2fs\n", cfg.Socket, time.Since(start).Seconds())
	}
	if err := srv.Serve(ctx, ln); err != nil {
		return err
	}
	if !cfg.Quiet {
		fmt.Fprintln(stderr, "ferry-serve: stopped")
	}
	return nil
}
