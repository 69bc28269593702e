// Package arrowcheck checks shard directories written by ferry with pyarrow,
// the reference Arrow implementation, in the pinned test venv (see
// internal/testutil/pyenv). Tests that write shards call CheckDir on what
// they wrote.
//
// The checker is check_shards.py (embedded here; the Python tests import the
// same file). It opens every shard the manifests list with pyarrow's
// memory-mapped IPC file reader, pyarrow.ipc.open_file(pyarrow.memory_map(path)),
// and compares what pyarrow decodes with expectations that do not come from
// pyarrow:
//
//   - ferry's Go reader: CheckDir first reads every shard with shard.Open
//     and hands the script, per record batch, its row count and the SHA-256
//     of each column's little-endian values (input_ids, labels, position_ids
//     in pack mode, length, segments.offsets, segments.sample,
//     segments.start, segments.length), plus the schema metadata the Go
//     reader parsed. Digests, not values, keep the hand-over small; a
//     mismatch names the shard, record batch and column.
//   - a plain-file reader: the values at the manifest's absolute buffer
//     offsets, read with pread (the offsets the Go reader found when the
//     writer checked the file, and what python/ferry maps). pyarrow's buffer
//     must start at that offset of its mapping and hold the same values; a
//     mismatch names the row and position.
//   - the manifest (file size, SHA-256, record batches and their rows, the
//     schema metadata) and the format's rules from docs/shard-format.md (the
//     exact schema, no nulls, contiguous segments summing to length, padding
//     and labels by policy, pack mode's position_ids and first labels).
//
// Cost: one Python process per test binary, started by the first check and
// kept for the next ones (it imports pyarrow once, about 0.3 s; it exits
// when the test binary does, as its stdin closes). Each check is one JSON
// line each way:
//
//	Go test binary                               python check_shards.py --serve
//	CheckDir(t, dirs...)
//	  shard.Open each shard: rows, metadata,
//	  SHA-256 per batch and column
//	  {"dirs": [...], "expect": [...]}  ───────►  pyarrow.ipc.open_file(memory_map(shard))
//	                                    ◄───────  {"ok": true|false, "report": "..."}
//	  t.Error(report) unless ok
//
// CheckDir and Check may be called from parallel tests (checks take turns).
// A missing interpreter or module (the script exits 3) is a test failure
// under FERRY_REQUIRE_TOOLS=1, as in make test, and a logged note
// otherwise: the calling test is not skipped, its own checks stand.
package arrowcheck
