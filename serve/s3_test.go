package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/internal/testutil/s3server"
	"github.com/ferryml/ferry/shard"
)

// upload copies a local dataprep output to loc (s3://…), optionally changing
// one file's bytes on the way.
func upload(t *testing.T, dir, loc string, mess func(name string, b []byte) []byte) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if mess != nil {
			b = mess(e.Name(), b)
		}
		w, err := storage.Create(context.Background(), loc+"/"+e.Name(), storage.WithOverwrite(true))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestServeFromS3(t *testing.T) {
	srv := s3server.Start(t)
	srv.SetEnv(t)
	bucket := srv.Bucket(t, "feed")
	dir := writeDataset(t, 2, 60, 16, shard.ModePad, 4)
	upload(t, dir, bucket+"/alpaca", nil)
	cache := t.TempDir()

	var (
		mu   sync.Mutex
		logs []string
	)
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, fmt.Sprintf(format, args...))
	}
	ts := startServer(t, Config{Data: bucket + "/alpaca", Ranks: []int{1}, CacheDir: cache, Logf: logf})
	mu.Lock()
	first := append([]string(nil), logs...)
	mu.Unlock()
	if len(first) != 1 || !strings.Contains(first[0], "fetched "+bucket+"/alpaca/"+shard.FileName(1, 2)) {
		t.Fatalf("logs %q", first)
	}
	// A second daemon reuses the verified copy.
	var logs2 []string
	ds, err := OpenDataset(context.Background(), bucket+"/alpaca", WithRanks(1), WithCacheDir(cache),
		WithLogf(func(format string, args ...any) { logs2 = append(logs2, fmt.Sprintf(format, args...)) }))
	if err != nil {
		t.Fatal(err)
	}
	ds.Close()
	if len(logs2) != 1 || !strings.HasPrefix(logs2[0], "using ") {
		t.Fatalf("logs %q", logs2)
	}
	// Only the served shard was fetched, named by its checksum.
	ents, _ := os.ReadDir(cache)
	if len(ents) != 1 || !strings.HasSuffix(ents[0].Name(), "-"+shard.FileName(1, 2)) {
		t.Fatalf("cache holds %v", ents)
	}
	c := dial(t, ts.sock, 3, 4)
	if n := drain(t, c, []int{1}, 30, readers(t, dir, 2), 0); n != 8 {
		t.Fatalf("%d batches", n)
	}

	// A corrupted upload is refused: the fetch checks the manifest's SHA-256.
	upload(t, dir, bucket+"/bad", func(name string, b []byte) []byte {
		if name == shard.FileName(0, 2) {
			b = append([]byte(nil), b...)
			b[len(b)/2] ^= 0x40
		}
		return b
	})
	_, err = OpenDataset(context.Background(), bucket+"/bad", WithRanks(0), WithCacheDir(t.TempDir()))
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("corrupt S3 shard: %v", err)
	}
	// No manifest: not a result.
	if _, err := OpenDataset(context.Background(), bucket+"/nothing", WithCacheDir(t.TempDir())); err == nil || !strings.Contains(err.Error(), "manifest.json") {
		t.Fatalf("missing manifest: %v", err)
	}
}
