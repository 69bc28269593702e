package serve

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/s3server"
	"github.com/ferryml/ferry/internal/testutil/smallfs"
	"github.com/ferryml/ferry/shard"
)

// The S3 fetch path writes a shard front to back: a cache directory on a
// FUSE mount that refuses any other write (as object-store volumes do)
// takes it, byte-identical to the dataprep output, and a second daemon
// reuses that copy.
func TestFetchToFUSECache(t *testing.T) {
	srv := s3server.Start(t)
	srv.SetEnv(t)
	bucket := srv.Bucket(t, "feed")
	dir := writeDataset(t, 2, 60, 16, shard.ModePad, 4)
	upload(t, dir, bucket+"/alpaca", nil)
	mnt := smallfs.AppendFUSE(t, true)
	cache := filepath.Join(mnt.Dir, "cache")
	if err := os.Mkdir(cache, 0o755); err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{"fetched ", "using "} {
		var logs []string
		ds, err := OpenDataset(context.Background(), bucket+"/alpaca", WithRanks(0, 1), WithCacheDir(cache),
			WithLogf(func(format string, args ...any) { logs = append(logs, strings.TrimSpace(fmt.Sprintf(format, args...))) }))
		if err != nil {
			t.Fatal(err)
		}
		ds.Close()
		if len(logs) != 2 || !strings.HasPrefix(logs[0], want) || !strings.HasPrefix(logs[1], want) {
			t.Fatalf("open %d: logs %q, want two %q", i, logs, want)
		}
	}
	for r := range 2 {
		name := shard.FileName(r, 2)
		want, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := filepath.Glob(filepath.Join(cache, "*-"+name))
		if err != nil || len(got) != 1 {
			t.Fatalf("cache copies of %s: %v %v", name, got, err)
		}
		b, err := os.ReadFile(got[0])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Fatalf("%s differs from %s", got[0], name)
		}
	}
	if n := mnt.Refused(); n != 0 {
		t.Fatalf("the file system refused %d of the fetch's writes", n)
	}
}
