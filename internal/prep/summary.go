package prep

import (
	"strconv"
	"strings"

	"github.com/ferryml/ferry/shard"
)

// Summary is a run's or a commit's report: what `dataprep --json` and
// `dataprep commit --json` print, one JSON object, which launchers
// (ferry.ray) read.
type Summary struct {
	Out              string  `json:"out"`
	Input            string  `json:"input"`
	Format           string  `json:"format"`
	Mode             string  `json:"mode"`
	Labels           string  `json:"labels"`
	SeqLen           int     `json:"seq_len"`
	Ranks            int     `json:"ranks"`
	RowsPerRank      int     `json:"rows_per_rank"`
	UniqueRows       int     `json:"unique_rows"`
	TotalRows        int     `json:"total_rows"`
	RecordsRead      int64   `json:"records_read"`
	RecordsSkipped   int64   `json:"records_skipped"`
	RecordsTruncated int64   `json:"records_truncated"`
	RecordsSplit     int64   `json:"records_split"`
	RecordsDropped   int64   `json:"records_dropped"`
	Tokens           int64   `json:"tokens"`
	PadTokens        int64   `json:"pad_tokens"`
	Efficiency       float64 `json:"efficiency"`
	InputBytes       int64   `json:"input_bytes"`
	OutputBytes      int64   `json:"output_bytes"`
	Seconds          float64 `json:"seconds"`
	MBPerSec         float64 `json:"mb_per_s"`
	Workers          int     `json:"workers"`
	ReadSeconds      float64 `json:"read_s"`     // read + parse the input, load the tokenizer (overlapped)
	TokenizeSeconds  float64 `json:"tokenize_s"` // format + tokenize
	WriteSeconds     float64 `json:"write_s"`    // pack, shuffle, write, verify, manifest
	// Sources are a mixture's (--recipe), as the manifest gives them.
	Sources []shard.SourceInfo `json:"sources,omitempty"`
}

// NewSummary is the summary of a run or commit into out with workers
// workers that took secs seconds.
func NewSummary(out string, workers int, res *Result, secs float64) Summary {
	m := res.Manifest
	var outBytes int64
	for _, f := range m.Files {
		outBytes += f.Bytes
	}
	return Summary{
		Out: out, Input: m.Input, Format: res.Format, Mode: string(m.Mode), Labels: string(m.Labels),
		SeqLen: m.SeqLen, Ranks: m.Ranks, RowsPerRank: m.RowsPerRank, UniqueRows: m.UniqueRows, TotalRows: m.TotalRows,
		RecordsRead: m.Stats.RecordsRead, RecordsSkipped: m.Stats.RecordsSkipped, RecordsTruncated: m.Stats.RecordsTruncated,
		RecordsSplit: m.Stats.RecordsSplit, RecordsDropped: m.Stats.RecordsDropped, Tokens: m.Stats.Tokens, PadTokens: m.Stats.PadTokens, Efficiency: m.Stats.Efficiency,
		InputBytes: res.InputBytes, OutputBytes: outBytes, Seconds: secs, MBPerSec: float64(res.Bytes) / 1e6 / secs, Workers: workers,
		ReadSeconds: res.Read.Seconds(), TokenizeSeconds: res.Tokenize.Seconds(), WriteSeconds: res.Write.Seconds(),
		Sources: m.Sources,
	}
}

// PartSummary is a part's report: what `dataprep --part I/N --json`
// prints, which launchers (ferry.ray) read.
type PartSummary struct {
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

// NewPartSummary is the summary of a part that took secs seconds.
func NewPartSummary(pr *PartResult, secs float64) PartSummary {
	m := pr.Manifest
	return PartSummary{Part: m.Part, Parts: m.Parts, PartsLoc: pr.PartsLoc, File: m.File.Path, Records: m.Records,
		RecordsSkipped: m.RecordsSkipped, Examples: m.Examples, Tokens: m.Tokens, InputBytes: m.InputBytes,
		OutputBytes: m.File.Bytes, Seconds: secs}
}

// ParsePart parses a part's name on the command line, "I/N" (0-based):
// 0 <= I < N <= shard.MaxParts.
func ParsePart(s string) (Part, error) {
	i, n, ok := strings.Cut(s, "/")
	var p Part
	var err1, err2 error
	p.I, err1 = strconv.Atoi(i)
	p.N, err2 = strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || p.N < 1 || p.N > shard.MaxParts || p.I < 0 || p.I >= p.N {
		return Part{}, configErr("--part %q: want I/N with 0 <= I < N <= %d", s, shard.MaxParts)
	}
	return p, nil
}
