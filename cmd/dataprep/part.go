package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/prep"
)

// partSummary is a part's final report (--json prints it as is).
type partSummary struct {
	Part           int     `json:"part"`
	Parts          int     `json:"parts"`
	PartsLoc       string  `json:"parts_loc"`
	File           string  `json:"file"`
	Records        int64   `json:"records"` // records of the share, skipped ones included
	RecordsSkipped int64   `json:"records_skipped"`
	Examples       int64   `json:"examples"`
	Tokens         int64   `json:"tokens"`
	InputBytes     int64   `json:"input_bytes"`
	OutputBytes    int64   `json:"output_bytes"`
	Seconds        float64 `json:"seconds"`
}

// printPart prints a part's summary: JSON on stdout with --json, a line on
// stderr unless --quiet.
func printPart(f *prepFlags, pr *prep.PartResult, secs float64, prog *cli.Phases, stdout io.Writer) {
	m := pr.Manifest
	s := partSummary{Part: m.Part, Parts: m.Parts, PartsLoc: pr.PartsLoc, File: m.File.Path, Records: m.Records,
		RecordsSkipped: m.RecordsSkipped, Examples: m.Examples, Tokens: m.Tokens, InputBytes: m.InputBytes,
		OutputBytes: m.File.Bytes, Seconds: secs}
	if f.jsonOut {
		b, _ := json.Marshal(s)
		fmt.Fprintf(stdout, "%s\n", b)
	}
	if !f.quiet {
		prog.Logf("%d records (%d skipped), %d examples, %d tokens -> %s (%.1f MB) in %.2f s",
			s.Records, s.RecordsSkipped, s.Examples, s.Tokens, pr.Loc, float64(s.OutputBytes)/1e6, s.Seconds)
	}
}
