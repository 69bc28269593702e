package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/smallfs"
	"github.com/ferryml/ferry/shard"
)

// withoutSeconds returns manifest.json with stats.seconds set to 0.
func withoutSeconds(t *testing.T, b []byte) []byte {
	t.Helper()
	re := regexp.MustCompile(`"seconds": [0-9.e+-]+`)
	if len(re.FindAll(b, -1)) != 1 {
		t.Fatalf("manifest.json has no single \"seconds\" field:\n%s", b)
	}
	return re.ReplaceAll(b, []byte(`"seconds": 0`))
}

// dataprep onto a FUSE mount that refuses every write not at the end of a
// file (as object-store volumes such as /Volumes do): the shards and the
// manifest are written front to back, and are byte-identical to a run onto
// local disk. A forced run over an existing output replaces it there too.
func TestFUSEOutput(t *testing.T) {
	mnt := smallfs.AppendFUSE(t, true)
	args := func(out string) []string {
		return []string{"--input", filepath.Join(alpacaDir, "alpaca_tiny.json"), "--tokenizer", qwen.dir,
			"--mode", "pack", "--seq-len", "256", "--ranks", "3", "--workers", "3", "--batch-rows", "7", "--quiet", "--out", out}
	}
	local := t.TempDir()
	mustPrep(t, args(local)...)
	out := filepath.Join(mnt.Dir, "data")
	mustPrep(t, args(out)...)
	mustPrep(t, append(args(out), "--force")...)
	if _, err := shard.ReadManifest(out); err != nil {
		t.Fatal(err)
	}
	names := func(dir string) []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range ents {
			out = append(out, e.Name())
		}
		return out
	}
	want, got := names(local), names(out)
	if !slices.Equal(want, got) {
		t.Fatalf("FUSE output has %v, local %v", got, want)
	}
	for _, n := range want {
		a, err := os.ReadFile(filepath.Join(local, n))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(out, n))
		if err != nil {
			t.Fatal(err)
		}
		if n == shard.ManifestName { // the run's wall time is the one field that differs
			a, b = withoutSeconds(t, a), withoutSeconds(t, b)
		}
		if !bytes.Equal(a, b) {
			t.Fatalf("%s differs between local disk (%d bytes) and the FUSE mount (%d bytes)", n, len(a), len(b))
		}
	}
	if n := mnt.Refused(); n != 0 {
		t.Fatalf("the file system refused %d of dataprep's writes", n)
	}
}
