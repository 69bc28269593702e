package ckpt

import "errors"

// Sentinel errors. Every error returned by this package that stems from one
// of these conditions wraps the matching sentinel, so callers can test it
// with errors.Is; the message names the file, byte offset, tensor and chunk
// involved.
var (
	// ErrCorrupt marks input that breaks the format: a malformed pickle,
	// a torch.save blob that is not a valid archive, a chunk outside its
	// tensor, overlapping chunks, gaps in coverage, lengths past a file's end.
	ErrCorrupt = errors.New("ckpt: corrupt checkpoint")
	// ErrUnsupported marks well-formed input that this package cannot
	// consolidate (an unknown stream transform, a big-endian blob, an
	// unknown dtype, a non-contiguous chunk above the in-memory limit).
	ErrUnsupported = errors.New("ckpt: unsupported checkpoint feature")
	// ErrUnsafePath marks a relative_path that would leave the checkpoint
	// directory.
	ErrUnsafePath = errors.New("ckpt: path escapes the checkpoint directory")
	// ErrLimit marks input above one of the documented size limits.
	ErrLimit = errors.New("ckpt: size limit exceeded")
	// ErrExists is returned when the output already holds a model and
	// overwriting was not asked for.
	ErrExists = errors.New("ckpt: output already exists")
	// ErrNotCheckpoint is returned when a directory holds neither a DCP
	// .metadata file nor DCP safetensors shards.
	ErrNotCheckpoint = errors.New("ckpt: not a checkpoint directory")
	// ErrVerify is returned when --verify finds output bytes that differ
	// from the source.
	ErrVerify = errors.New("ckpt: verification failed")
	// ErrConfig marks an invalid option or mapping (a bad --rename rule,
	// two source keys mapped to one output name).
	ErrConfig = errors.New("ckpt: invalid configuration")
)
