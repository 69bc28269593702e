package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// dirEntries lists every name in dir, temporary files included, so that
// tests see leftovers that List would hide.
func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

func writeAll(ctx context.Context, loc string, data []byte, chunk int, opts ...Option) error {
	w, err := Create(ctx, loc, opts...)
	if err != nil {
		return err
	}
	defer w.Abort()
	for len(data) > 0 {
		n := min(chunk, len(data))
		if _, err := w.Write(data[:n]); err != nil {
			return err
		}
		data = data[n:]
	}
	return w.Commit()
}

func TestLocalRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, size := range []int{0, 1, 4095, localBufSize, localBufSize + 1, 3*localBufSize + 17} {
		data := randBytes(size, uint64(size))
		loc := filepath.Join(dir, "obj")
		for _, chunk := range []int{1000, 1 << 22} {
			if err := writeAll(ctx, loc, data, chunk, WithOverwrite(true)); err != nil {
				t.Fatalf("size %d: %v", size, err)
			}
			got, err := os.ReadFile(loc)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("size %d chunk %d: read back %d bytes, err %v", size, chunk, len(got), err)
			}
		}
		r, err := Open(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		if r.Size() != int64(size) {
			t.Fatalf("Size = %d, want %d", r.Size(), size)
		}
		if size > 10 {
			buf := make([]byte, size/2)
			if _, err := r.ReadAt(buf, int64(size/3)); err != nil || !bytes.Equal(buf, data[size/3:size/3+size/2]) {
				t.Fatalf("ReadAt: %v", err)
			}
		}
		r.Close()
		s, n, err := OpenStream(ctx, loc)
		if err != nil || n != int64(size) {
			t.Fatalf("OpenStream: %d %v", n, err)
		}
		got, err := io.ReadAll(s)
		s.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("stream: %v", err)
		}
		info, err := Stat(ctx, loc)
		if err != nil || info.Size != int64(size) || info.Loc != loc {
			t.Fatalf("Stat = %+v, %v", info, err)
		}
	}
	if names := dirEntries(t, dir); len(names) != 1 || names[0] != "obj" {
		t.Fatalf("directory holds %q, want only obj", names)
	}
}

func TestLocalAllOrNothing(t *testing.T) {
	dir := t.TempDir()
	old := []byte("previous complete object")
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, old, 0o644); err != nil {
		t.Fatal(err)
	}
	data := randBytes(3<<20, 1)
	tests := []struct {
		name    string
		loc     string
		opts    []Option
		run     func(ctx context.Context, cancel context.CancelFunc, w Writer) error
		wantErr error // from Create or from run
	}{
		{
			name:    "exists without overwrite",
			loc:     target,
			wantErr: fs.ErrExist,
		},
		{
			name:    "missing target dir",
			loc:     filepath.Join(dir, "no", "such", "dir", "x"),
			wantErr: fs.ErrNotExist,
		},
		{
			name: "abort",
			loc:  target,
			opts: []Option{WithOverwrite(true)},
			run: func(ctx context.Context, cancel context.CancelFunc, w Writer) error {
				w.Write(data)
				w.Abort()
				return w.Commit()
			},
			wantErr: ErrAborted,
		},
		{
			name: "cancel mid write",
			loc:  target,
			opts: []Option{WithOverwrite(true)},
			run: func(ctx context.Context, cancel context.CancelFunc, w Writer) error {
				if _, err := w.Write(data[:1<<20]); err != nil {
					return err
				}
				cancel()
				if _, err := w.Write(data[1<<20:]); err == nil {
					return errors.New("write after cancel succeeded")
				}
				return w.Commit()
			},
			wantErr: context.Canceled,
		},
		{
			name: "cancel before commit",
			loc:  target,
			opts: []Option{WithOverwrite(true)},
			run: func(ctx context.Context, cancel context.CancelFunc, w Writer) error {
				if _, err := w.Write(data); err != nil {
					return err
				}
				cancel()
				return w.Commit()
			},
			wantErr: context.Canceled,
		},
		{
			name: "target created meanwhile",
			loc:  filepath.Join(dir, "racy"),
			run: func(ctx context.Context, cancel context.CancelFunc, w Writer) error {
				w.Write(data)
				if err := os.WriteFile(filepath.Join(dir, "racy"), old, 0o644); err != nil {
					return err
				}
				return w.Commit()
			},
			wantErr: fs.ErrExist,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w, err := Create(ctx, tt.loc, tt.opts...)
			if err == nil {
				defer w.Abort()
				err = tt.run(ctx, cancel, w)
				if aerr := w.Abort(); aerr != nil {
					t.Errorf("Abort after failure: %v", aerr)
				}
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			got, err := os.ReadFile(target)
			if err != nil || !bytes.Equal(got, old) {
				t.Fatalf("previous object changed: %q %v", got, err)
			}
			for _, n := range dirEntries(t, dir) {
				if strings.Contains(n, tempMarker) {
					t.Fatalf("temporary file %s left behind", n)
				}
			}
		})
	}
}

func TestLocalCommitTwiceAndAbortAfterCommit(t *testing.T) {
	loc := filepath.Join(t.TempDir(), "f")
	w, err := Create(context.Background(), loc)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("abc"))
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(); err != nil {
		t.Fatalf("second Commit: %v", err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Commit: %v, want ErrClosed", err)
	}
	if got, _ := os.ReadFile(loc); string(got) != "abc" {
		t.Fatalf("content %q", got)
	}
}

func TestLocalStatListRemove(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	if _, err := Stat(ctx, filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat missing: %v", err)
	}
	if err := Remove(ctx, filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Remove missing: %v", err)
	}
	if l, err := List(ctx, filepath.Join(dir, "missing")); err != nil || len(l) != 0 {
		t.Fatalf("List missing dir = %v, %v", l, err)
	}
	os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755)
	for _, n := range []string{"z", "a/x", "a/b/y"} {
		if err := writeAll(ctx, filepath.Join(dir, n), []byte(n), 10); err != nil {
			t.Fatal(err)
		}
	}
	// A crashed writer's temporary file is not a result.
	os.WriteFile(filepath.Join(dir, ".z"+tempMarker+"dead"), []byte("partial"), 0o644)
	l, err := List(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range l {
		rel, _ := filepath.Rel(dir, i.Loc)
		got = append(got, rel+":"+string(rune('0'+i.Size)))
	}
	want := []string{"a/b/y:5", "a/x:3", "z:1"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("List = %v, want %v", got, want)
	}
	if err := Remove(ctx, filepath.Join(dir, "a/x")); err != nil {
		t.Fatal(err)
	}
	if _, err := Stat(ctx, filepath.Join(dir, "a/x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat after Remove: %v", err)
	}
}

func TestJoin(t *testing.T) {
	tests := []struct {
		base string
		elem []string
		want string
	}{
		{"s3://b", []string{"x", "y"}, "s3://b/x/y"},
		{"s3://b/", []string{"x/"}, "s3://b/x"},
		{"s3://b/pre/", []string{"a", "../c", "./d"}, "s3://b/pre/c/d"},
		{"s3://b/pre", []string{"../../.."}, "s3://b/"},
		{"out", []string{"rank-0.arrow"}, "out/rank-0.arrow"},
		{"/v/a/", []string{"../b"}, "/v/b"},
	}
	for _, tt := range tests {
		if got := Join(tt.base, tt.elem...); got != tt.want {
			t.Errorf("Join(%q, %q) = %q, want %q", tt.base, tt.elem, got, tt.want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, o := range []Option{WithPartSize(1), WithPartSize(MaxPartSize + 1), WithParallelism(0), WithPerm(fs.ModeDir)} {
		if _, err := Create(context.Background(), filepath.Join(t.TempDir(), "x"), o); !errors.Is(err, ErrBadOption) {
			t.Errorf("err = %v, want ErrBadOption", err)
		}
	}
}

// TestLocalCopy copies a file with io.Copy(Writer, OpenStream(...)), which
// takes the in-kernel path, and checks the bytes.
func TestLocalCopy(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	defer func(c int64) { copyChunk = c }(copyChunk)
	copyChunk = 1 << 20
	data := randBytes(int(3*copyChunk+5), 21) // several chunks of the copy loop
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, _, err := OpenStream(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	head := make([]byte, 1000)
	if _, err := io.ReadFull(s, head); err != nil { // the copy continues from here
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst")
	w, err := Create(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	w.Write(head)
	if n, err := io.Copy(w, s); err != nil || n != int64(len(data)-1000) {
		t.Fatalf("io.Copy = %d, %v", n, err)
	}
	if err := w.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copy differs (%d bytes, %v)", len(got), err)
	}
}
