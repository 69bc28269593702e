package ckpt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
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

// tmpMarker is part of every temporary output name: a file with it is an
// unfinished write and never a complete-looking output.
const tmpMarker = ".ckptmerge-tmp-"

// DirSink returns a Sink writing into a local directory (created if
// missing). Files are written as hidden temporary files ("."+name+
// ".ckptmerge-tmp-XXXX") with positioned writes from several goroutines
// (or in order by one writer: MergeOptions.WriteMode, and on FUSE mounts),
// fsynced, then renamed into place; the directory is fsynced after the
// rename.
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
	if !overwrite {
		if _, err := os.Lstat(final); err == nil {
			return nil, fmt.Errorf("%s: %w", final, ErrExists)
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(d.dir, "."+name+tmpMarker+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return &localOut{f: f, tmp: tmp, final: final, size: size, fuse: onFUSE(d.dir)}, nil
}

type localOut struct {
	f          *os.File
	tmp, final string
	size       int64
	pos        int64
	done       bool
	fuse       bool // the directory is on a FUSE mount (WriteAuto writes in order)
}

func (o *localOut) Write(p []byte) (int, error) {
	n, err := o.f.WriteAt(p, o.pos)
	o.pos += int64(n)
	return n, err
}

func (o *localOut) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }

func (o *localOut) Commit() error {
	if o.done {
		return fmt.Errorf("%s: commit after close", o.final)
	}
	o.done = true
	fail := func(err error) error {
		o.f.Close()
		os.Remove(o.tmp)
		return fmt.Errorf("%s: %w", o.final, err)
	}
	if o.size >= 0 {
		st, err := o.f.Stat()
		if err != nil {
			return fail(err)
		}
		if st.Size() != o.size {
			return fail(fmt.Errorf("file is %d bytes, planned %d", st.Size(), o.size))
		}
	}
	if err := storage.SyncFile(o.f); err != nil {
		return fail(err)
	}
	if err := o.f.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(o.tmp, o.final); err != nil {
		os.Remove(o.tmp)
		return fmt.Errorf("%s: %w", o.final, err)
	}
	if dir, err := os.Open(filepath.Dir(o.final)); err == nil {
		dir.Sync()
		dir.Close()
	}
	return nil
}

func (o *localOut) Abort() error {
	if o.done {
		return nil
	}
	o.done = true
	o.f.Close()
	return os.Remove(o.tmp)
}

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
