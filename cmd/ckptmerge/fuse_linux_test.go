package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/smallfs"
	"github.com/ferryml/ferry/internal/testutil/synthckpt"
)

// The command onto a FUSE mount that refuses writes not at the end of a
// file: --write-mode auto writes every file sequentially, in memory
// bounded by the buffers (not by the 64 MiB model), with the bytes of a
// merge onto local disk; --write-mode parallel fails, says why, and
// leaves nothing.
func TestFUSEMount(t *testing.T) {
	bin := buildBinary(t)
	src := t.TempDir()
	synthckpt.HFShards(t, src, 16, 512, 2048, 4) // 64 MiB
	mnt := smallfs.AppendFUSE(t, true)
	args := []string{"--json", "--parallelism", "4", "--buffer-size", "65536", "--max-shard-size", "20MB", src}
	local := t.TempDir()
	if b, err := exec.Command(bin, append(args, local)...).CombinedOutput(); err != nil {
		t.Fatalf("local: %v\n%s", err, b)
	}
	out := filepath.Join(mnt.Dir, "model")
	b, err := exec.Command(bin, append(args, out)...).Output()
	if err != nil {
		t.Fatalf("FUSE: %v\n%s", err, b)
	}
	var sum struct {
		Files []struct {
			Name string `json:"name"`
			IO   string `json:"io"`
		} `json:"files"`
		PeakRSS int64 `json:"peak_rss_bytes"`
	}
	if err := json.Unmarshal(b, &sum); err != nil || len(sum.Files) != 4 {
		t.Fatalf("summary (%v):\n%s", err, b)
	}
	for _, f := range sum.Files {
		if f.IO != "sequential" {
			t.Fatalf("%s written %s on a FUSE mount", f.Name, f.IO)
		}
	}
	if sum.PeakRSS == 0 || sum.PeakRSS > 32<<20 {
		t.Errorf("peak RSS %d bytes merging 64 MiB sequentially with 64 KiB buffers, want < 32 MiB", sum.PeakRSS)
	}
	t.Logf("sequential onto FUSE: peak RSS %d MiB", sum.PeakRSS>>20)
	names := mustReadDir(t, local)
	if got := mustReadDir(t, out); strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("FUSE output %v, local %v", got, names)
	}
	for _, n := range names {
		sameFile(t, filepath.Join(out, n), filepath.Join(local, n))
	}

	bad := filepath.Join(mnt.Dir, "parallel")
	cmd := exec.Command(bin, append([]string{"--write-mode", "parallel", "--quiet"}, append(args[1:], bad)...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 ||
		!strings.Contains(stderr.String(), "operation not supported") || !strings.Contains(stderr.String(), "FUSE mount") {
		t.Fatalf("--write-mode parallel on FUSE: %v\n%s", err, stderr.String())
	}
	if left, _ := os.ReadDir(bad); len(left) != 0 {
		t.Fatalf("the failed merge left %v", left)
	}
	if mnt.Refused() == 0 {
		t.Fatal("the file system refused no write")
	}
	t.Logf("--write-mode parallel: %s", strings.TrimSpace(stderr.String()))
}
