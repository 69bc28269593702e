package storage

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// tempMarker is part of every temporary file name, so that List never
// reports the leftovers of a crashed writer as results.
const tempMarker = ".ferry-tmp-"

// localBufSize is the write buffer of a local Writer: small writes are
// batched into syscalls of this size, large ones go straight through.
const localBufSize = 1 << 20

// localReader reads a file with pread(2); the kernel's page cache does the
// rest. Safe for concurrent ReadAt.
type localReader struct {
	f    *os.File
	size int64
}

func openLocal(ctx context.Context, path string) (Reader, error) {
	if err := ctx.Err(); err != nil {
		return nil, pathError("open", path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("storage: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("storage: %w", err)
	}
	if st.IsDir() {
		f.Close()
		return nil, pathError("open", path, errors.New("is a directory"))
	}
	return &localReader{f: f, size: st.Size()}, nil
}

func (r *localReader) ReadAt(p []byte, off int64) (int, error) { return r.f.ReadAt(p, off) }
func (r *localReader) Size() int64                             { return r.size }
func (r *localReader) Close() error                            { return r.f.Close() }

// localStream is a sequential read of a local file. Copying it into a
// local Writer with io.Copy uses copy_file_range(2), as cp does.
type localStream struct {
	f *os.File
}

func (s localStream) Read(p []byte) (int, error) { return s.f.Read(p) }
func (s localStream) Close() error               { return s.f.Close() }

// WriteTo copies the rest of the file to w: in the kernel when w is a
// local Writer or a file, straight into part buffers for an S3 Writer.
func (s localStream) WriteTo(w io.Writer) (int64, error) {
	if rf, ok := w.(io.ReaderFrom); ok {
		return rf.ReadFrom(s.f)
	}
	return io.Copy(w, onlyReader{s.f})
}

func openLocalStream(ctx context.Context, path string) (io.ReadCloser, int64, error) {
	r, err := openLocal(ctx, path)
	if err != nil {
		return nil, 0, err
	}
	lr := r.(*localReader)
	adviseSequential(lr.f)
	return localStream{f: lr.f}, lr.size, nil
}

func statLocal(ctx context.Context, path string) (Info, error) {
	if err := ctx.Err(); err != nil {
		return Info{}, pathError("stat", path, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		return Info{}, fmt.Errorf("storage: %w", err)
	}
	return Info{Loc: path, Size: st.Size(), ModTime: st.ModTime()}, nil
}

func listLocal(ctx context.Context, dir string) ([]Info, error) {
	var out []Info
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return pathError("list", dir, cerr)
		}
		if err != nil {
			if p == dir && errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipAll
			}
			return fmt.Errorf("storage: list: %w", err)
		}
		if d.IsDir() || strings.Contains(d.Name(), tempMarker) {
			return nil
		}
		st, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while listing
			}
			return fmt.Errorf("storage: list: %w", err)
		}
		if !st.Mode().IsRegular() {
			return nil
		}
		out = append(out, Info{Loc: p, Size: st.Size(), ModTime: st.ModTime()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func removeLocal(ctx context.Context, path string) error {
	if err := ctx.Err(); err != nil {
		return pathError("remove", path, err)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	return nil
}

// localWriter writes through an AtomicFile (temporary file next to the
// target, fsync, rename, fsync of the directory) with a write buffer and
// context checks. Bytes are written strictly in order (no seeks), which
// FUSE volumes that refuse random writes accept.
type localWriter struct {
	ctx  context.Context
	path string
	a    *AtomicFile
	bw   *bufio.Writer
	err  error // sticky error of a failed Write
	n    int64
}

func createLocal(ctx context.Context, path string, cfg *config) (Writer, error) {
	a, err := createAtomic(path, cfg)
	if err != nil {
		return nil, err
	}
	return &localWriter{ctx: ctx, path: path, a: a, bw: bufio.NewWriterSize(a.File(), localBufSize)}, nil
}

// copyChunk is how much ReadFrom copies between checks of the context.
var copyChunk int64 = 64 << 20 // a variable for tests

// ReadFrom copies r to the file. When r is a file the kernel copies the
// bytes (copy_file_range or splice); the context is checked every 64 MiB.
func (w *localWriter) ReadFrom(r io.Reader) (int64, error) {
	if ls, ok := r.(localStream); ok {
		r = ls.f
	}
	f, ok := r.(*os.File)
	if !ok {
		return io.Copy(onlyWriter{w}, r)
	}
	if w.err != nil {
		return 0, w.err
	}
	if w.closed() {
		return 0, pathError("write", w.path, ErrClosed)
	}
	if err := w.bw.Flush(); err != nil {
		w.fail(fmt.Errorf("storage: write %s (%d bytes written): %w", w.path, w.n, unwrapPathErr(err)))
		return 0, w.err
	}
	var total int64
	for {
		if err := w.ctx.Err(); err != nil {
			w.fail(pathError("write", w.path, err))
			return total, w.err
		}
		n, err := w.a.File().ReadFrom(io.LimitReader(f, copyChunk))
		total += n
		w.n += n
		if err != nil {
			w.fail(fmt.Errorf("storage: write %s (%d bytes written): %w", w.path, w.n, unwrapPathErr(err)))
			return total, w.err
		}
		if n < copyChunk {
			return total, nil
		}
	}
}

type onlyWriter struct{ io.Writer }

func (w *localWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.closed() {
		return 0, pathError("write", w.path, ErrClosed)
	}
	if err := w.ctx.Err(); err != nil {
		w.fail(pathError("write", w.path, err))
		return 0, w.err
	}
	n, err := w.bw.Write(p)
	w.n += int64(n)
	if err != nil {
		w.fail(fmt.Errorf("storage: write %s (%d bytes written): %w", w.path, w.n, unwrapPathErr(err)))
		return n, w.err
	}
	return n, nil
}

// closed reports whether the file was committed or aborted.
func (w *localWriter) closed() bool {
	w.a.mu.Lock()
	defer w.a.mu.Unlock()
	return w.a.end.Closed()
}

// fail records err as sticky and discards the temporary file at once, so a
// failed write never leaves bytes on a full disk.
func (w *localWriter) fail(err error) {
	w.err = err
	w.a.Abort()
}

func (w *localWriter) Commit() error {
	if w.err != nil {
		return w.err
	}
	if err := w.commit(); err != nil {
		w.fail(err)
		return err
	}
	return nil
}

func (w *localWriter) commit() error {
	if w.closed() {
		return w.a.Commit(w.ctx) // nil after a Commit, ErrAborted after an Abort
	}
	if err := w.ctx.Err(); err != nil {
		return pathError("commit", w.path, err)
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("storage: write %s (%d bytes written): %w", w.path, w.n, unwrapPathErr(err))
	}
	return w.a.Commit(w.ctx)
}

func (w *localWriter) Abort() error {
	w.a.Abort()
	return nil
}
