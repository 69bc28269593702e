package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/internal/testutil/s3server"
	"github.com/ferryml/ferry/shard"
)

// TestS3 reads the input from and writes the shards to a real S3 server
// (versitygw), then checks the downloaded result like a local one.
func TestS3(t *testing.T) {
	srv := s3server.Start(t)
	srv.SetEnv(t)
	bucket := srv.Bucket(t, "ferry-data")
	ctx := context.Background()
	in := bucket + "/in/alpaca.json.zst"
	raw, err := os.ReadFile(filepath.Join(alpacaDir, "alpaca_en_demo.json.zst"))
	if err != nil {
		t.Fatal(err)
	}
	put := func(loc string) {
		t.Helper()
		w, err := storage.Create(ctx, loc)
		if err != nil {
			t.Fatal(err)
		}
		defer w.Abort()
		if _, err := w.Write(raw); err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	put(in)
	out := bucket + "/shards"
	args := []string{"--input", in, "--tokenizer", qwen.dir, "--mode", "pack", "--ranks", "2", "--quiet", "--out", out}
	mustPrep(t, args...)
	if _, _, err := dataprep(t, args...); !errors.Is(err, shard.ErrExists) {
		t.Fatalf("second run without --force: %v, want ErrExists", err)
	}
	mustPrep(t, append(args, "--force")...)

	local := t.TempDir()
	infos, err := storage.List(ctx, out+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 4 {
		t.Fatalf("%d objects under %s, want 2 shards + %s + manifest: %v", len(infos), out, shard.LossTokensName, infos)
	}
	for _, in := range infos {
		rc, _, err := storage.OpenStream(ctx, in.Loc)
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(filepath.Join(local, filepath.Base(in.Loc)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(f, rc); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		f.Close()
	}
	seen := map[int64]int{}
	m := allRows(t, local, func(m *shard.Manifest, pos int, r *shard.Row) {
		if pos < m.UniqueRows {
			for _, s := range r.Segments {
				seen[s.Sample]++
			}
		}
	})
	if len(seen) != 999 || m.Stats.RecordsRead != 999 || m.Input != in {
		t.Fatalf("%d samples, stats %+v, input %q", len(seen), m.Stats, m.Input)
	}

	// A glob under an s3:// prefix: the matching objects in key order, the
	// others (another split, a deeper key) left out.
	for _, key := range []string{"in/train-1.json.zst", "in/train-0.json.zst", "in/test-0.json.zst", "in/sub/train-2.json.zst"} {
		put(bucket + "/" + key)
	}
	files, err := dataset.Expand(ctx, []string{bucket + "/in/train-*.json.zst"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{bucket + "/in/train-0.json.zst", bucket + "/in/train-1.json.zst"}; !slices.Equal(files, want) {
		t.Fatalf("s3 glob: %v, want %v", files, want)
	}
	out2 := bucket + "/shards2"
	mustPrep(t, "--input", bucket+"/in/train-*.json.zst", "--tokenizer", qwen.dir, "--ranks", "2", "--quiet", "--out", out2)
	rc, _, err := storage.OpenStream(ctx, out2+"/"+shard.ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := shard.DecodeManifest(out2, rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if m2.Stats.RecordsRead != 2*999 || m2.Input != strings.Join(files, ", ") {
		t.Fatalf("s3 glob run: %d records, input %q", m2.Stats.RecordsRead, m2.Input)
	}
}
