package cli_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/ferryml/ferry/internal/cli"
)

func ExampleReport() {
	report := cli.Report{
		Usage: func(w io.Writer, err error) { fmt.Fprintf(w, "tool: %v\nrun 'tool --help' for usage\n", err) },
		Error: func(w io.Writer, err error) { fmt.Fprintf(w, "tool: %v\n", err) },
	}
	run := func(ctx context.Context, args []string, _ io.Reader, _, _ io.Writer) error {
		if len(args) != 1 {
			return fmt.Errorf("%w: want one FILE, got %d arguments", cli.ErrUsage, len(args))
		}
		return nil
	}
	// A command's main is: func main() { cli.Main(run, report.Code) }
	code := cli.Run(nil, nil, os.Stdout, os.Stdout, run, report.Code)
	fmt.Println("exit", code)
	// Output:
	// tool: bad usage: want one FILE, got 0 arguments
	// run 'tool --help' for usage
	// exit 2
}
