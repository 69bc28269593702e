package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"
)

// Sentinel errors. Errors returned by this package wrap one of these, or
// fs.ErrNotExist / fs.ErrExist / context errors, so callers match them with
// errors.Is.
var (
	// ErrClosed is returned by a Reader or Writer used after Close, Commit
	// or Abort.
	ErrClosed = errors.New("storage: use after close")
	// ErrAborted is returned by Write or Commit after the writer was
	// aborted (explicitly, or because an earlier write failed).
	ErrAborted = errors.New("storage: write aborted")
	// ErrBadLocation is returned for a location that is neither a path nor
	// a well-formed s3://bucket/key URL.
	ErrBadLocation = errors.New("storage: bad location")
	// ErrBadOption is returned for an invalid option value.
	ErrBadOption = errors.New("storage: bad option")
	// ErrChanged is returned by an S3 Reader whose object was replaced
	// after Open: it never mixes bytes of two versions.
	ErrChanged = errors.New("storage: object changed since it was opened")
	// ErrAccessDenied wraps S3 authentication and authorisation failures
	// (wrong keys, expired token, missing permission).
	ErrAccessDenied = errors.New("storage: access denied")
)

// Reader gives random access to a complete object or file. It is safe for
// concurrent use by several goroutines (ReadAt has no shared offset).
type Reader interface {
	io.ReaderAt
	io.Closer
	// Size is the size of the object in bytes, fixed when it was opened.
	Size() int64
}

// Writer receives the bytes of a new object in order. Nothing is visible
// at the target location until Commit returns nil; Abort, a failed Write
// or a cancelled context leave nothing behind (and any previous object at
// the location untouched). Abort after Commit is a no-op, so
//
//	w, err := storage.Create(ctx, loc)
//	if err != nil { return err }
//	defer w.Abort()
//	... w.Write(...) ...
//	return w.Commit()
//
// is the idiom. A Writer is not safe for concurrent use.
type Writer interface {
	io.Writer
	// Commit flushes everything written, makes the object visible
	// atomically at its location and releases the writer's resources.
	Commit() error
	// Abort discards everything written and releases the writer's
	// resources. It is a no-op after Commit or a previous Abort.
	Abort() error
}

// Info describes one stored object or file.
type Info struct {
	Loc     string // location as accepted by Open: a path or s3://bucket/key
	Size    int64
	ModTime time.Time
}

// Open opens loc for random access.
func Open(ctx context.Context, loc string, opts ...Option) (Reader, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if IsS3(loc) {
		return openS3(ctx, loc, cfg)
	}
	return openLocal(ctx, loc)
}

// OpenStream opens loc for one sequential read and returns its size. For
// S3 objects larger than one part it fetches ranges in parallel ahead of
// the reader (memory: part size x parallelism); local files are read with
// the kernel's read-ahead.
func OpenStream(ctx context.Context, loc string, opts ...Option) (io.ReadCloser, int64, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, 0, err
	}
	if IsS3(loc) {
		return openS3Stream(ctx, loc, cfg)
	}
	return openLocalStream(ctx, loc)
}

// Create starts writing a new object at loc. See Writer for the
// all-or-nothing contract. Unless WithOverwrite(true) is given, Create (and
// Commit, which checks again) fail with an error wrapping fs.ErrExist when
// loc already exists. For a local path the parent directory must exist.
func Create(ctx context.Context, loc string, opts ...Option) (Writer, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", loc, err)
	}
	if IsS3(loc) {
		return createS3(ctx, loc, cfg)
	}
	return createLocal(ctx, loc, cfg)
}

// Stat describes loc. A missing file or object gives an error wrapping
// fs.ErrNotExist.
func Stat(ctx context.Context, loc string, opts ...Option) (Info, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return Info{}, err
	}
	if IsS3(loc) {
		return statS3(ctx, loc, cfg)
	}
	return statLocal(ctx, loc)
}

// List returns every file (local: recursively under the directory prefix)
// or object (S3: every key starting with the prefix) sorted by location.
// Directories are not listed. A missing local directory or an S3 prefix
// without objects gives an empty list; a missing bucket gives an error
// wrapping fs.ErrNotExist.
func List(ctx context.Context, prefix string, opts ...Option) ([]Info, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if IsS3(prefix) {
		return listS3(ctx, prefix, cfg)
	}
	return listLocal(ctx, prefix)
}

// Remove deletes loc. Removing a missing file or object gives an error
// wrapping fs.ErrNotExist.
func Remove(ctx context.Context, loc string, opts ...Option) error {
	cfg, err := newConfig(opts)
	if err != nil {
		return err
	}
	if IsS3(loc) {
		return removeS3(ctx, loc, cfg)
	}
	return removeLocal(ctx, loc)
}

// IsS3 reports whether loc is an s3:// URL.
func IsS3(loc string) bool {
	return strings.HasPrefix(loc, "s3://")
}

// Join appends path elements to base. For s3:// URLs it joins with "/"
// and cleans "." and ".." inside the key without ever leaving the bucket;
// for local paths it is filepath.Join.
func Join(base string, elem ...string) string {
	if !IsS3(base) {
		return filepath.Join(append([]string{base}, elem...)...)
	}
	rest := strings.TrimPrefix(base, "s3://")
	bucket, key, _ := strings.Cut(rest, "/")
	parts := make([]string, 0, 8)
	add := func(s string) {
		for _, p := range strings.Split(s, "/") {
			switch p {
			case "", ".":
			case "..":
				if len(parts) > 0 {
					parts = parts[:len(parts)-1]
				}
			default:
				parts = append(parts, p)
			}
		}
	}
	add(key)
	for _, e := range elem {
		add(e)
	}
	return "s3://" + bucket + "/" + strings.Join(parts, "/")
}

// pathError builds the "storage: op loc: err" error used throughout.
func pathError(op, loc string, err error) error {
	return &fs.PathError{Op: "storage: " + op, Path: loc, Err: err}
}
