package ckpt

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
)

// File is one input file: random access, known size. ReadAt must be safe
// for concurrent use (os.File, storage readers).
type File interface {
	io.ReaderAt
	io.Closer
	Size() int64
}

// Source gives access to the files of one checkpoint directory, local or
// remote. Names are slash-separated paths relative to the directory, already
// checked by CheckRelPath.
type Source interface {
	// Open opens one file of the checkpoint.
	Open(ctx context.Context, name string) (File, error)
	// List returns the names of the regular files directly in the directory.
	List(ctx context.Context) ([]string, error)
	// String names the directory in messages.
	String() string
}

// CheckRelPath rejects a relative_path read from a checkpoint that could
// leave the checkpoint directory: absolute paths, ".." elements, empty
// elements, backslashes and NUL bytes.
func CheckRelPath(name string) error {
	if name == "" || !fs.ValidPath(name) || name == "." || strings.ContainsAny(name, "\\\x00") {
		return fmt.Errorf("%w: relative_path %q", ErrUnsafePath, name)
	}
	return nil
}

// DirSource returns a Source for a local directory. Files are opened through
// an os.Root, so symbolic links cannot lead outside the directory either.
func DirSource(dir string) Source { return &dirSource{dir: dir} }

type dirSource struct {
	dir string
}

type osFile struct {
	*os.File
	size int64
	// reopen opens a second descriptor of the same file (for copy workers
	// that need their own file offset); nil when not possible.
	reopen func() (*os.File, error)
}

func (f *osFile) Size() int64 { return f.size }

func (d *dirSource) String() string { return d.dir }

func (d *dirSource) Open(_ context.Context, name string) (File, error) {
	if err := CheckRelPath(name); err != nil {
		return nil, fmt.Errorf("%s: %w", d.dir, err)
	}
	root, err := os.OpenRoot(d.dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	f, err := root.Open(name)
	if err != nil {
		if strings.Contains(err.Error(), "escapes") {
			return nil, fmt.Errorf("%s: %w: %v", d.dir, ErrUnsafePath, err)
		}
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s/%s: %w: not a regular file", d.dir, name, ErrCorrupt)
	}
	dir := d.dir
	return &osFile{File: f, size: st.Size(), reopen: func() (*os.File, error) {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		return root.Open(name)
	}}, nil
}

func (d *dirSource) List(context.Context) ([]string, error) {
	ents, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// readAll reads a whole small file, refusing files above limit.
func readAll(ctx context.Context, src Source, name string, limit int64) ([]byte, error) {
	f, err := src.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if f.Size() > limit {
		return nil, fmt.Errorf("%s/%s: %w: %d bytes, limit %d", src, name, ErrLimit, f.Size(), limit)
	}
	buf := make([]byte, f.Size())
	if _, err := f.ReadAt(buf, 0); err != nil && err != io.EOF {
		return nil, fmt.Errorf("%s/%s: %w", src, name, err)
	}
	return buf, nil
}
