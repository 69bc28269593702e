// Package prep is dataprep's pipeline as a library: it reads an input
// (local or s3://, one or several files), tokenizes it and writes the
// shard directory of docs/shard-format.md. The dataprep command parses
// flags into a Config and prints what Run, RunPart and Commit return;
// launchers (ferry.ray and others) may call the same functions.
//
//	Run      the whole input in one process:   load -> encode -> writeShards
//	RunPart  part I of a split run (docs/parts.md): load part I's share ->
//	         encode -> part-IIIII-of-NNNNN.bin, then its .json, into the parts
//	Commit   every part of a split run:        discover -> open and check
//	         (shard.PartManifest.OpenFile) -> check the tiling -> assemble ->
//	         writeShards
//
// and the other dataprep subcommands' passes:
//
//	Tokenize  dataprep tokenize: texts or Alpaca records -> {"ids": [...]}
//	          lines (IDs, the contract of bench/anchors/hf_tokenize.py)
//	Render    dataprep render: conversations -> the chat template's text and
//	          its ids, one JSON line per record
//	Verify, InspectTokenizer, DescribeRow
//	          dataprep inspect: a shard directory's checks and one row's
//	          segments, decoded
//
// The split-run contract lives here and in shard: Run and Commit lay the
// examples out through one function (writeShards), so that a committed
// split run is byte-identical to a single run with the same inputs and
// options (manifest.json's stats.seconds aside). The three cuts of
// MaxRecords (head.go) are what make that hold for a limited run.
//
// Concurrency: Run, RunPart and Commit may be called concurrently with
// different outputs; each uses up to Config.Workers goroutines, all ended
// before it returns. Memory: a run holds the decoded records and the
// tokenized examples of its input (a part: of its share); Commit holds one
// entry per example and maps the part files (S3 parts are fetched to a
// temporary directory first).
package prep
