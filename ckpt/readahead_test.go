package ckpt

import (
	"bytes"
	"context"
	"io"
	"math/rand"
	"path/filepath"
	"sync/atomic"
	"testing"
)

func TestEdgeReaderMatchesUnderlying(t *testing.T) {
	rng := rand.New(rand.NewSource(2))
	for _, size := range []int{0, 10, edgeWindow, 2*edgeWindow + 1, 5 * edgeWindow} {
		data := make([]byte, size)
		rng.Read(data)
		e, err := newEdgeReader(bytes.NewReader(data), int64(size))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2000; i++ {
			off := rng.Intn(size + 10)
			n := rng.Intn(edgeWindow + 100)
			got := make([]byte, n)
			want := make([]byte, n)
			gn, gerr := e.ReadAt(got, int64(off))
			wn, werr := bytes.NewReader(data).ReadAt(want, int64(off))
			if gn != wn || (gerr == nil) != (werr == nil) || !bytes.Equal(got[:gn], want[:wn]) {
				t.Fatalf("size %d ReadAt(%d bytes at %d) = %d, %v; want %d, %v", size, n, off, gn, gerr, wn, werr)
			}
		}
	}
}

type countingSource struct {
	Source
	reads atomic.Int64
}

type countingFile struct {
	File
	n *atomic.Int64
}

func (c *countingFile) ReadAt(p []byte, off int64) (int, error) {
	c.n.Add(1)
	return c.File.ReadAt(p, off)
}

func (c *countingSource) Open(ctx context.Context, name string) (File, error) {
	f, err := c.Source.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	return &countingFile{File: f, n: &c.reads}, nil
}

// TestOpenReadsPerChunk: opening a checkpoint costs at most two reads per
// chunk (the head and the tail of its blob), which bounds requests on S3.
func TestOpenReadsPerChunk(t *testing.T) {
	src := &countingSource{Source: DirSource(filepath.Join(fixtureRoot, "torch-1.13", "fsdp1-bf16-ws4"))}
	ck, err := Open(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	chunks := 0
	for _, it := range ck.Meta.Items {
		chunks += len(it.Chunks)
	}
	if n := src.reads.Load(); n > int64(2*chunks) {
		t.Fatalf("%d reads to open %d chunks, want at most %d", n, chunks, 2*chunks)
	}
	var _ io.ReaderAt = &edgeReader{}
}
