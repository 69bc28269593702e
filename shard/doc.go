// Package shard writes and reads token shards: fixed-length training rows
// stored as uncompressed Arrow IPC files, one file per training rank, plus a
// manifest.json written last. The contract is docs/shard-format.md; this
// package is its reference implementation.
//
// Trade-off: rows are fixed length (seq_len) so that a rank can map its
// file and hand numpy/torch views of it to the training loop without any
// copy or parsing; the price is the padding, which pack mode cuts to a few
// percent.
//
// # Layout
//
//	OUT/
//	  rank-00000-of-00016.arrow   Arrow IPC file (magic "ARROW1"), uncompressed
//	  ...
//	  manifest.json               last; its presence means "complete"
//
//	rank file:
//	  +---------+----------------+------------------------------+----------+--------+
//	  | ARROW1  | schema message | record batch 0 … batch k−1   | footer   | ARROW1 |
//	  | \0\0    | (+ metadata)   | ≤ batch_rows rows each       | + int32  |        |
//	  +---------+----------------+------------------------------+----------+--------+
//	  record batch = 0xFFFFFFFF, int32 metadata length, flatbuffer, body;
//	  body = the values buffers, each 8-byte aligned, in column order:
//	    input_ids     int32[rows × seq_len]         (fixed_size_list child)
//	    labels        int32[rows × seq_len]         −100 = no loss
//	    position_ids  int32[rows × seq_len]         pack mode only
//	    length        int32[rows]                   non-pad tokens per row
//	    segments      int32 offsets[rows+1], then struct children
//	                  sample int64[n], start int32[n], length int32[n]
//
// The manifest records every values buffer's absolute file offset, so a
// reader without Arrow can np.frombuffer the mapped file.
//
// Global order: unique rows are shuffled by Permutation(n, seed) (SplitMix64
// + Fisher–Yates, defined exactly in order.go) and laid out in total_rows =
// ranks × rows_per_rank positions (wrapping around, or cut with drop_last);
// position p lives in rank p % ranks, row p / ranks.
//
// # Writing
//
// Three levels: Writer writes one shard file to an io.Writer row by row;
// Layout.Fill builds a Row from tokenized Examples (labels policy, pack-mode
// position ids and first-label masking); WriteDir writes a whole directory
// (or s3:// prefix) from a RowSource, in parallel, atomically, manifest last.
// NewExampleSource turns examples into rows (one per example in pad mode,
// best-fit-decreasing packing in pack mode).
//
// Synthetic shards for other components' tests, without a tokenizer:
//
//	go run ./shard/internal/mkshards -out DIR -ranks N -rows M -seq-len L -mode pad|pack
//	    [-labels mask-pad|copy|mask-prompt] [-seed S] [-batch-rows B] [-drop-last] [-force]
//
// # Reading
//
// This package holds the one parser of the format in Go; serve builds on it.
// DecodeManifest (ReadManifest for a local directory) reads manifest.json
// and validates it whole (Manifest.Validate): format and version, seq_len,
// ranks and file names, row counts, every file's batches (batch_rows rows
// each, the last one fewer, in order) and every buffer offset (8-byte
// aligned, inside the file's bytes), so that a reader without Arrow can
// view the file at those offsets.
//
// Open maps a file (NewMappedReader takes bytes already in memory) and
// validates its whole structure up front: magic, schema and its metadata,
// every batch's buffer sizes, no nulls, lengths within seq_len, segments
// contiguous from 0 and covering exactly length tokens (one at least per
// row). Token values are not checked. Manifest.OpenFile opens the shard of
// a rank from any path (the directory, or a copy fetched from S3): it checks
// the file's size (and SHA-256, WithChecksum) against the manifest before
// parsing, then the structure, then the file against its entry
// (VerifyFile: schema metadata, rows, batch layout, buffer offsets). OpenDir
// is ReadManifest plus OpenFile.
//
// # Concurrency and lifetimes
//
// A Writer is not safe for concurrent use and keeps its first error. A
// Reader's methods may be called by several goroutines at once, except
// Close, which must come after all of them; every slice it returns aliases
// the mapped file and is valid until Close. WriteDir calls RowSource.FillRow
// from several goroutines.
//
// # Limits
//
// seq_len ≤ MaxSeqLen, ranks ≤ MaxRanks, IPC metadata ≤ MaxMetadataBytes,
// manifest ≤ MaxManifestBytes; every count and offset read from a file is
// checked against the file size before use.
package shard
