package shard

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// nodeModules returns $FERRY_NODE_MODULES (default
// $HOME/.cache/ferry/npm/node_modules) if node and apache-arrow are there.
// A missing tool fails the test under FERRY_REQUIRE_TOOLS=1 and skips it
// otherwise.
func nodeModules(t *testing.T) string {
	t.Helper()
	missing := func(what string) {
		if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%s is missing (FERRY_REQUIRE_TOOLS=1); run scripts/setup-test-deps", what)
		}
		t.Skipf("%s is missing; run scripts/setup-test-deps (make test fails instead of skipping)", what)
	}
	if _, err := exec.LookPath("node"); err != nil {
		missing("node")
	}
	dir := os.Getenv("FERRY_NODE_MODULES")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "ferry", "npm", "node_modules")
	}
	if _, err := os.Stat(filepath.Join(dir, "apache-arrow", "package.json")); err != nil {
		missing("npm apache-arrow in " + dir)
	}
	return dir
}

func hash32(h uint32, v []int32) uint32 {
	for _, x := range v {
		h = h*31 + uint32(x)
	}
	return h
}

// TestNodeArrowReadsShards: npm apache-arrow reads every shard with the
// same schema metadata, row counts, SHA-256 and column contents as ours.
func TestNodeArrowReadsShards(t *testing.T) {
	mods := nodeModules(t)
	root := t.TempDir()
	var dirs []string
	for _, mode := range []Mode{ModePad, ModePack} {
		dir := filepath.Join(root, string(mode))
		dirs = append(dirs, dir)
		t.Run(string(mode), func(t *testing.T) {
			m, _ := writeSynth(t, dir, mode, LabelsMaskPrompt, 700, 64, 3, false, 100)
			var files []string
			for _, f := range m.Files {
				files = append(files, filepath.Join(dir, f.Path))
			}
			cmd := exec.Command("node", append([]string{filepath.Join("testdata", "read-arrow.js")}, files...)...)
			cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node: %v\n%s", err, stderr.String())
			}
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<20)
			rank := 0
			for ; sc.Scan(); rank++ {
				var got struct {
					SHA256   string
					Rows     int
					Batches  int
					Metadata map[string]string
					Hash     map[string]uint32
				}
				if err := json.Unmarshal(sc.Bytes(), &got); err != nil {
					t.Fatal(err)
				}
				fe := m.Files[rank]
				if got.SHA256 != fe.SHA256 || got.Rows != fe.Rows || got.Batches != len(fe.Batches) {
					t.Fatalf("rank %d: node sees sha %s rows %d batches %d; manifest %s %d %d", rank, got.SHA256, got.Rows, got.Batches, fe.SHA256, fe.Rows, len(fe.Batches))
				}
				if got.Metadata[MetaRank] != strconv.Itoa(rank) || got.Metadata[MetaMode] != string(mode) || got.Metadata[MetaFormat] != FormatName {
					t.Fatalf("rank %d: metadata %v", rank, got.Metadata)
				}
				r, err := Open(files[rank])
				if err != nil {
					t.Fatal(err)
				}
				want := map[string]uint32{}
				var row Row
				var segs int
				var offs, sample, start, slen uint32
				for i := range r.NumRows() {
					if err := r.Row(i, &row); err != nil {
						t.Fatal(err)
					}
					want[ColInputIDs] = hash32(want[ColInputIDs], row.InputIDs)
					want[ColLabels] = hash32(want[ColLabels], row.Labels)
					if mode == ModePack {
						want[ColPositionIDs] = hash32(want[ColPositionIDs], row.PositionIDs)
					}
					want[ColLength] = hash32(want[ColLength], []int32{row.Length})
					offs = offs*31 + uint32(len(row.Segments))
					for _, s := range row.Segments {
						sample = sample*31 + uint32(uint64(s.Sample))
						sample = sample*31 + uint32(uint64(s.Sample)>>32)
						start = start*31 + uint32(s.Start)
						slen = slen*31 + uint32(s.Length)
						segs++
					}
				}
				r.Close()
				want["seg_counts"], want["seg_sample"], want["seg_start"], want["seg_length"], want["segments"] = offs, sample, start, slen, uint32(segs)
				for k, v := range want {
					if got.Hash[k] != v {
						t.Errorf("rank %d column %s: node checksum %d, Go %d", rank, k, got.Hash[k], v)
					}
				}
				if len(got.Hash) != len(want) {
					t.Errorf("rank %d: node hashed %d columns, Go %d", rank, len(got.Hash), len(want))
				}
			}
			if rank != len(m.Files) {
				t.Fatalf("node read %d files of %d", rank, len(m.Files))
			}
		})
	}
	CheckArrow(t, dirs...) // and pyarrow, the third implementation
}
