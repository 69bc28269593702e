// Package ckpt consolidates sharded PyTorch distributed checkpoints
// (torch.distributed.checkpoint, "DCP", as written by FSDP1/FSDP2,
// accelerate and torchtitan, torch 1.13 to 2.x) into Hugging Face
// safetensors files, streaming: no tensor is ever held whole in memory.
//
// The trade-off: everything is planned from metadata before a byte is
// copied (Open reads .metadata and every chunk's torch.save header and
// checks that the chunks tile each tensor), so a bad checkpoint fails
// before the output is touched, and the copy itself is a bounded pipeline
// of positioned reads and writes that runs near disk speed.
//
// # Write paths
//
// A local output on a file system with direct I/O (statx reports
// STATX_DIOALIGN: ext4, xfs, btrfs on Linux >= 6.1) is cut into aligned
// spans of BufferSize; each worker fills a span in memory (the header
// bytes, then every tensor piece falling into it, read with pread and cast
// if asked) and writes it with O_DIRECT. The bytes are copied once, from
// the source's page cache into the span, and go from there to the device:
// no dirty pages to write back at fsync, no model-sized page cache churn
// on a training node. Elsewhere (tmpfs, FUSE, network file systems, or
// MergeOptions.NoDirectIO) workers copy each tensor's contiguous pieces
// with copy_file_range and the rest through buffers, with positioned
// writes and a background fsync every 256 MiB; non-local sinks (S3) get
// the same buffers in file order. On a FUSE mount (statfs reports
// FUSE_SUPER_MAGIC: Databricks /Volumes, gcsfuse, mountpoint-s3 and other
// object-store volumes, which refuse writes that are not at the end of the
// file) a local output is written sequentially (IOSequential): the workers
// still read and cast in parallel, one writer appends their buffers in
// file order, in the same bounded memory. MergeOptions.WriteMode forces
// either way; positioned writes forced onto a FUSE mount that refuses
// them fail with an error saying so, and leave nothing behind.
// Result.Files[i].IO names the path taken.
// Direct I/O and copy_file_range are Linux's (direct_linux.go); on other
// systems (macOS) a local output is always written buffered (IOBuffered),
// with the same bytes. "Local" means an OutputFile that implements
// LocalOutput (DirSink's do; any Sink's may): Merge asks for that
// interface, not for a concrete type. Every path gets its bytes from one
// fill-then-cast step (fill.go), the one Verify uses too.
//
// The code follows the stages: merge.go (options, Merge), write.go (the
// write paths), direct.go (aligned spans), kernelcopy.go, fill.go
// (regions of a tensor read from the chunks, cast), verify.go.
//
// # Use
//
//	ck, err := ckpt.OpenDir(ctx, "ckpt/step-100")           // or Open(ctx, StorageSource("s3://..."))
//	sel, skipped, err := ckpt.SelectTensors(ck.Meta, ckpt.KeyOptions{})
//	plan, err := ckpt.NewPlan(sel, skipped, ckpt.PlanOptions{DType: ckpt.BF16})
//	res, err := ckpt.Merge(ctx, ck, plan, ckpt.DirSink("hf/"), ckpt.MergeOptions{Verify: true})
//
// # Concurrency and lifetimes
//
// A Checkpoint is safe for concurrent use once Open returns; Close releases
// its files (and the temporary files stream transforms were decoded to).
// Merge runs MergeOptions.Parallelism copy workers (plus, without direct
// I/O, one dispatcher and one writer goroutine) per output file, all owned
// by the call: they have ended when Merge returns. Memory is bounded by
// about (3 x Parallelism + 1) x BufferSize (4 MiB by default; with direct
// I/O about 1.3 x Parallelism x BufferSize), whatever the model size; the
// metadata itself is held in memory (a few hundred bytes per chunk).
//
// # Limits
//
// .metadata at most MaxMetadataSize (1 GiB); data.pkl inside a blob at most
// 16 MiB; safetensors headers at most MaxHeaderSize (100 MB, as the
// reference reader); tensors of at most 64 dimensions whose byte size fits
// in an int64; chunks stored with non-row-major strides (saved
// transposed) at most MaxGatherSize (256 MiB), gathered in memory.
// Every length, offset and count read from a file is checked against the
// file size before use. The pickle decoder never executes anything: every
// class or function it meets becomes an inert record, and only the DCP
// classes are interpreted, by class name.
//
// # Errors
//
// Errors wrap ErrCorrupt, ErrUnsupported, ErrUnsafePath, ErrLimit,
// ErrExists, ErrNotCheckpoint, ErrVerify or ErrConfig, and name the file,
// tensor, chunk (as global index ranges) and byte offsets involved, e.g.
//
//	ckpt/__3_0.distcp: ckpt: corrupt checkpoint: item "lm_head.weight": bytes [24380, 27591) past end of the 25000-byte file
//
// # Input: a DCP directory
//
//	CKPT/
//	  .metadata        pickle (protocol 2-5) of Metadata:
//	                     state_dict_metadata {key: TensorStorageMetadata(properties, size, chunks[offsets, sizes])
//	                                               | BytesStorageMetadata}
//	                     storage_data {MetadataIndex(fqn, offset, index): _StorageInfo(relative_path, offset, length
//	                                                                        [, transform_descriptors])}
//	                     planner_data {key: path tuple} (>= 2.0), storage_meta, version (newer)
//	  __R_N.distcp     items back to back, no header or padding:
//
//	  +--------------------+--------------------+-----+
//	  | item @ offset 0    | item @ offset L0   | ... |    each item: [offset, offset+length)
//	  +--------------------+--------------------+-----+
//
//	  item = torch.save zip archive (or that archive through "stream.zstd/1"):
//	  +--------------------------------+-------------------------+-------------------+-----------+
//	  | PK\3\4 archive/data.pkl        | PK\3\4 archive/data/0   | archive/version,  | central   |
//	  | (pickle: _rebuild_tensor_v2(   | raw little-endian       | byteorder, ...    | directory |
//	  |  storage, storage_offset,      | elements, stored, 64-   |                   | + EOCD    |
//	  |  size, stride, ...))           | byte aligned            |                   |           |
//	  +--------------------------------+-------------------------+-------------------+-----------+
//
// or, for torch's SAFETENSORS serialization, one safetensors blob per file
// after the bytes items. A directory without .metadata is read as
// safetensors shards of torch's HuggingFaceStorageWriter: each file's
// __metadata__ DCP_SHARDING_INFO gives every tensor's saved_offsets.
//
// # Output: safetensors
//
//	+----------+------------------------------------------+---------------------------------+
//	| N (u64   | N bytes of JSON, compact, space-padded   | tensor bytes, row-major,        |
//	| LE)      | to a multiple of 8:                      | little-endian, back to back in  |
//	|          | {"__metadata__":{"format":"pt"},         | header order; the file ends at  |
//	|          |  "name":{"dtype":"BF16","shape":[..],    | the last tensor                 |
//	|          |   "data_offsets":[begin,end]},...}       |                                 |
//	+----------+------------------------------------------+---------------------------------+
//
// Inside a file tensors are ordered as the safetensors library orders them
// (dtype alignment descending, then name), so a single-file output is
// byte-identical to safetensors.torch.save_file of the consolidated state
// dict. Above MaxShardSize, files are model-0000k-of-0000n.safetensors
// (split in state-dict order, huggingface_hub's rule) and
// model.safetensors.index.json ({"metadata": {"total_parameters",
// "total_size"}, "weight_map": {name: file}}) is written last.
//
// # Durability
//
// Every output file is written under a hidden temporary name (".NAME"
// + ".ckptmerge-tmp-" + random), fsynced and renamed into place only when
// complete, never over a file that appeared meanwhile unless Force, then
// the directory is fsynced (storage.AtomicFile; on S3: a multipart upload
// completed on Commit); the index comes last. A merge that fails or is killed leaves no index and no file under a
// final name that is not complete.
package ckpt
