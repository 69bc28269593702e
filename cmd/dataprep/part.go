package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/prep"
)

// printPart prints a part's summary: JSON on stdout with --json, a line on
// stderr unless --quiet.
func printPart(f *prepFlags, pr *prep.PartResult, secs float64, prog *cli.Phases, stdout io.Writer) {
	s := prep.NewPartSummary(pr, secs)
	if f.jsonOut {
		b, _ := json.Marshal(s)
		fmt.Fprintf(stdout, "%s\n", b)
	}
	if !f.quiet {
		prog.Logf("%d records (%d skipped), %d examples, %d tokens -> %s (%.1f MB) in %.2f s",
			s.Records, s.RecordsSkipped, s.Examples, s.Tokens, pr.Loc, float64(s.OutputBytes)/1e6, s.Seconds)
	}
}
