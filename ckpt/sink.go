package ckpt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/ferryml/ferry/internal/storage"
)

// OutputFile receives the bytes of one output file. Nothing appears under
// the final name before Commit returns nil; Abort (or a crash) leaves no
// file under the final name. Implementations that also implement
// io.WriterAt accept positioned writes from several goroutines at once
// (the local fast path); otherwise bytes are written in order.
type OutputFile interface {
	io.Writer
	Commit() error
	Abort() error
}

// Sink is an output directory, local or remote.
type Sink interface {
	// Create starts a file of the given final size. With overwrite an
	// existing file of that name is replaced on Commit.
	Create(ctx context.Context, name string, size int64, overwrite bool) (OutputFile, error)
	// List returns the names of the files directly in the directory.
	List(ctx context.Context) ([]string, error)
	// Remove deletes a file.
	Remove(ctx context.Context, name string) error
	// Reader returns a Source reading the directory back (for --verify).
	Reader() Source
	String() string
}

// LocalOutput is implemented by an OutputFile that is a local file being
// written. Merge asks for it (as io.Copy asks for io.WriterTo) and then
// takes the local fast paths: positioned writes from several workers,
// direct I/O through a second, O_DIRECT descriptor, in-kernel copies
// (copy_file_range) and early writeback; on a FUSE mount WriteAuto
// writes in order instead. Any Sink may return one; DirSink does.
type LocalOutput interface {
	OutputFile
	io.WriterAt
	// File is the open file being written, for Truncate and Sync; the
	// caller does not close it.
	File() *os.File
	// TempPath names the file being written, for opening more
	// descriptors on it before Commit.
	TempPath() string
	// OnFUSE reports whether the file is on a FUSE mount.
	OnFUSE() bool
}

// tmpMarker is part of every temporary output name: a file with it is an
// unfinished write and never a complete-looking output.
const tmpMarker = ".ckptmerge-tmp-"

// DirSink returns a Sink writing into a local directory (created if
// missing). Its files are LocalOutputs, each a storage.AtomicFile: a
// hidden temporary file ("."+name+".ckptmerge-tmp-XXXX") written with
// positioned writes from several goroutines (or in order by one writer:
// MergeOptions.WriteMode, and on FUSE mounts), fsynced, then renamed into
// place (without overwrite, never over a file that appeared meanwhile);
// the directory is fsynced after the rename.
func DirSink(dir string) Sink { return &dirSink{dir: dir} }

type dirSink struct{ dir string }

func (d *dirSink) String() string { return d.dir }
func (d *dirSink) Reader() Source { return DirSource(d.dir) }
func (d *dirSink) Remove(_ context.Context, name string) error {
	return os.Remove(filepath.Join(d.dir, name))
}

func (d *dirSink) List(context.Context) ([]string, error) {
	ents, err := os.ReadDir(d.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

func (d *dirSink) Create(_ context.Context, name string, size int64, overwrite bool) (OutputFile, error) {
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return nil, err
	}
	final := filepath.Join(d.dir, name)
	a, err := storage.CreateAtomic(final, storage.WithOverwrite(overwrite), storage.WithTempMarker(tmpMarker))
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s: %w", final, ErrExists)
	}
	if err != nil {
		return nil, err
	}
	return &localOut{a: a, size: size, fuse: onFUSE(d.dir)}, nil
}

// localOut is DirSink's LocalOutput.
type localOut struct {
	a    *storage.AtomicFile
	size int64 // planned size, checked by Commit; < 0: unknown
	pos  int64
	fuse bool // the directory is on a FUSE mount (WriteAuto writes in order)
}

func (o *localOut) Write(p []byte) (int, error) {
	n, err := o.a.File().WriteAt(p, o.pos)
	o.pos += int64(n)
	return n, err
}

func (o *localOut) WriteAt(p []byte, off int64) (int, error) { return o.a.File().WriteAt(p, off) }
func (o *localOut) File() *os.File                           { return o.a.File() }
func (o *localOut) TempPath() string                         { return o.a.TempName() }
func (o *localOut) OnFUSE() bool                             { return o.fuse }

// Commit checks the planned size, then commits the AtomicFile.
func (o *localOut) Commit() error {
	if o.size >= 0 {
		st, err := o.a.File().Stat()
		if err == nil && st.Size() != o.size {
			err = fmt.Errorf("file is %d bytes, planned %d", st.Size(), o.size)
		}
		if err != nil {
			o.a.Abort()
			return fmt.Errorf("%s: %w", o.a.Name(), err)
		}
	}
	err := o.a.Commit(context.Background())
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", o.a.Name(), ErrExists)
	}
	return err
}

func (o *localOut) Abort() error { return o.a.Abort() }

// StorageSink returns a Sink writing through internal/storage (an s3://
// prefix or a local path): each file is streamed in order (S3: a
// multipart upload committed on Commit, no local temporary copy).
func StorageSink(loc string) Sink { return &storageSink{loc: loc} }

type storageSink struct{ loc string }

func (s *storageSink) String() string { return s.loc }
func (s *storageSink) Reader() Source { return StorageSource(s.loc) }

func (s *storageSink) Create(ctx context.Context, name string, size int64, overwrite bool) (OutputFile, error) {
	opts := []storage.Option{storage.WithOverwrite(overwrite)}
	// S3 allows 10,000 parts per upload: grow the part size for huge files
	if part := (size/9000 + 1<<20 - 1) &^ (1<<20 - 1); part > storage.DefaultPartSize {
		opts = append(opts, storage.WithPartSize(min(part, storage.MaxPartSize)))
	}
	w, err := storage.Create(ctx, storage.Join(s.loc, name), opts...)
	if errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s: %w", storage.Join(s.loc, name), ErrExists)
	}
	return w, err
}

func (s *storageSink) List(ctx context.Context) ([]string, error) {
	return listDirect(ctx, s.loc)
}

func (s *storageSink) Remove(ctx context.Context, name string) error {
	return storage.Remove(ctx, storage.Join(s.loc, name))
}

// StorageSource returns a Source reading a checkpoint directory through
// internal/storage (an s3:// prefix or a local path).
func StorageSource(loc string) Source { return &storageSource{loc: loc} }

type storageSource struct{ loc string }

func (s *storageSource) String() string { return s.loc }

func (s *storageSource) Open(ctx context.Context, name string) (File, error) {
	if err := CheckRelPath(name); err != nil {
		return nil, fmt.Errorf("%s: %w", s.loc, err)
	}
	return storage.Open(ctx, storage.Join(s.loc, name))
}

func (s *storageSource) List(ctx context.Context) ([]string, error) {
	return listDirect(ctx, s.loc)
}

func listDirect(ctx context.Context, loc string) ([]string, error) {
	infos, err := storage.List(ctx, loc)
	if err != nil {
		return nil, err
	}
	prefix := strings.TrimSuffix(storage.Join(loc, "x"), "x")
	var out []string
	for _, in := range infos {
		rel := strings.TrimPrefix(in.Loc, prefix)
		if rel != "" && !strings.Contains(rel, "/") && rel != in.Loc {
			out = append(out, rel)
		}
	}
	sort.Strings(out)
	return out, nil
}
