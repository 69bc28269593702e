package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferryml/ferry/ckpt"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/internal/testutil/s3server"
	"github.com/ferryml/ferry/internal/testutil/synthckpt"
)

const fixtures = "../../testdata/dcp"

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Fatalf("%s (%d bytes) differs from %s (%d bytes)", a, len(x), b, len(y))
	}
}

func TestExitCodes(t *testing.T) {
	src := filepath.Join(fixtures, "torch-1.13", "mixed-ws4")
	out := t.TempDir()
	for _, tt := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "want CKPT and OUT"},
		{[]string{"--bogus", src, out}, 2, "not defined"},
		{[]string{"--dtype", "int8", src, out}, 2, "--dtype"},
		{[]string{"--max-shard-size", "lots", src, out}, 2, "--max-shard-size"},
		{[]string{"--rename", "(=x", src, out}, 2, "--rename"},
		{[]string{"--write-mode", "random", src, out}, 2, "--write-mode"},
		{[]string{"inspect"}, 2, "one CKPT"},
		{[]string{filepath.Join(t.TempDir(), "missing"), out}, 1, "does not exist"},
		{[]string{"--help"}, 0, "Usage: ckptmerge"},
		{[]string{src, out, "--verify"}, 0, "verified 25 tensors"},
		{[]string{src, out}, 1, "already exists"},
		{[]string{"--force", src, out}, 0, "wrote model.safetensors"},
		{[]string{filepath.Join(fixtures, "torch2-rot13"), t.TempDir()}, 1, "stream.rot13/1"},
	} {
		code, _, stderr := run(t, tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("ckptmerge %q: exit %d, want %d; stderr:\n%s(want %q)", tt.args, code, tt.code, stderr, tt.want)
		}
	}
	sameFile(t, filepath.Join(out, "model.safetensors"), filepath.Join(src, "expected.safetensors"))
	seq := t.TempDir()
	if code, _, stderr := run(t, "--write-mode", "sequential", "--verify", src, seq); code != 0 || !strings.Contains(stderr, "sequential") {
		t.Fatalf("--write-mode sequential: exit %d:\n%s", code, stderr)
	}
	sameFile(t, filepath.Join(seq, "model.safetensors"), filepath.Join(src, "expected.safetensors"))
	if code, stdout, _ := run(t, "--version"); code != 0 || !strings.HasPrefix(stdout, "ckptmerge dev (commit ") {
		t.Fatalf("--version: exit %d, %q", code, stdout)
	}
}

func TestJSONAndInspect(t *testing.T) {
	src := filepath.Join(fixtures, "torch2-ws4")
	out := t.TempDir()
	code, stdout, stderr := run(t, "--json", "--verify", "--include-optimizer", "--dtype", "fp32", src, out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Format   string
		Verified bool
		Tensors  []struct{ Name, DType, SHA256 string }
		Skipped  []struct{ Key string }
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("--json output: %v\n%s", err, stdout)
	}
	if res.Format != "dcp" || !res.Verified || len(res.Tensors) != 27 || len(res.Skipped) != 3 {
		t.Fatalf("summary: format %q verified %v tensors %d skipped %d", res.Format, res.Verified, len(res.Tensors), len(res.Skipped))
	}
	for _, tr := range res.Tensors {
		if len(tr.SHA256) != 64 || (tr.Name != "extra.step_count" && tr.DType != "F32") {
			t.Fatalf("tensor %+v", tr)
		}
	}
	code, stdout, _ = run(t, "inspect", src)
	if code != 0 || !strings.Contains(stdout, "27 tensors, 27036 parameters") || !strings.Contains(stdout, "model.model.norm.weight") ||
		!strings.Contains(stdout, "optimizer.param_groups.0.lr (431 bytes in __0_0.distcp)") {
		t.Fatalf("inspect: exit %d\n%s", code, stdout)
	}
	code, stdout, _ = run(t, "inspect", "--json", src)
	var rep inspectReport
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || rep.Ranks != 4 || rep.Files != 8 || rep.Version != "1.0.0" ||
		!rep.StorageMeta || rep.OutputNames["model.lm_head.weight"] != "lm_head.weight" {
		t.Fatalf("inspect --json: exit %d %+v", code, rep)
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	os.MkdirAll(dst, 0o755)
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(src, e.Name()))
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
}

func TestLayouts(t *testing.T) {
	// accelerate: <ckpt>/pytorch_model_fsdp_0 + optimizer_0
	acc := t.TempDir()
	copyTree(t, filepath.Join(fixtures, "torch2-ws4"), filepath.Join(acc, "pytorch_model_fsdp_0"))
	copyTree(t, filepath.Join(fixtures, "torch-1.13", "tp-ws2"), filepath.Join(acc, "optimizer_0"))
	os.WriteFile(filepath.Join(acc, "random_states_0.pkl"), []byte("x"), 0o644)
	out := t.TempDir()
	if code, _, stderr := run(t, acc, out); code != 0 || !strings.Contains(stderr, "pytorch_model_fsdp_0") {
		t.Fatalf("accelerate layout: exit %d\n%s", code, stderr)
	}
	sameFile(t, filepath.Join(out, "model.safetensors"), filepath.Join(fixtures, "torch2-ws4", "expected.safetensors"))
	// torchtitan: <dump>/checkpoint/step-N, highest N wins
	tt := t.TempDir()
	copyTree(t, filepath.Join(fixtures, "torch-1.13", "tp-ws2"), filepath.Join(tt, "checkpoint", "step-20"))
	copyTree(t, filepath.Join(fixtures, "torch-1.13", "mixed-ws4"), filepath.Join(tt, "checkpoint", "step-100"))
	out = t.TempDir()
	if code, _, stderr := run(t, tt, out); code != 0 || !strings.Contains(stderr, "step-100") {
		t.Fatalf("torchtitan layout: exit %d\n%s", code, stderr)
	}
	sameFile(t, filepath.Join(out, "model.safetensors"), filepath.Join(fixtures, "torch-1.13", "mixed-ws4", "expected.safetensors"))
	// torchtitan saving HF safetensors: step-N holds safetensors files
	tt = t.TempDir()
	copyTree(t, filepath.Join(fixtures, "hf-sharded-ws4"), filepath.Join(tt, "step-7"))
	out = t.TempDir()
	if code, _, stderr := run(t, tt, out); code != 0 || !strings.Contains(stderr, "step-7") {
		t.Fatalf("torchtitan safetensors layout: exit %d\n%s", code, stderr)
	}
	sameFile(t, filepath.Join(out, "model.safetensors"), filepath.Join(fixtures, "hf-sharded-ws4", "expected.safetensors"))
	// HF storage writer with enable_consolidation: shards in <path>/sharded
	hf := t.TempDir()
	copyTree(t, filepath.Join(fixtures, "hf-sharded-ws4"), filepath.Join(hf, "sharded"))
	os.Remove(filepath.Join(hf, "sharded", "expected.safetensors"))
	out = t.TempDir()
	if code, _, stderr := run(t, hf, out); code != 0 || !strings.Contains(stderr, "sharded") {
		t.Fatalf("sharded/ layout: exit %d\n%s", code, stderr)
	}
	sameFile(t, filepath.Join(out, "model.safetensors"), filepath.Join(fixtures, "hf-sharded-ws4", "expected.safetensors"))
	// HF storage writer shards, with config files copied
	cfg := t.TempDir()
	os.WriteFile(filepath.Join(cfg, "config.json"), []byte(`{"model_type":"llama"}`), 0o644)
	out = t.TempDir()
	if code, _, stderr := run(t, "--config-from", cfg, filepath.Join(fixtures, "hf-sharded-ws4"), out); code != 0 {
		t.Fatalf("hf shards: exit %d\n%s", code, stderr)
	}
	sameFile(t, filepath.Join(out, "model.safetensors"), filepath.Join(fixtures, "hf-sharded-ws4", "expected.safetensors"))
	sameFile(t, filepath.Join(out, "config.json"), filepath.Join(cfg, "config.json"))
}

// writeSyntheticShards writes a checkpoint in the HF storage writer layout
// (safetensors with DCP_SHARDING_INFO): nt F32 tensors [rows, cols] split
// over ranks files along dim 0. It returns the tensor bytes.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ckptmerge")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// checkNoPartialOutput asserts that every file under a final name in out is
// a complete safetensors file and that the index exists only if complete.
func checkNoPartialOutput(t *testing.T, out string, completed bool) {
	t.Helper()
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		n := e.Name()
		switch {
		case n == ckpt.IndexName:
			if !completed {
				t.Fatalf("killed merge left %s", n)
			}
			b, err := os.ReadFile(filepath.Join(out, n))
			if err != nil {
				t.Fatal(err)
			}
			var idx struct {
				WeightMap map[string]string `json:"weight_map"`
			}
			if err := json.Unmarshal(b, &idx); err != nil || len(idx.WeightMap) == 0 {
				t.Fatalf("%s: %v (%d tensors)", n, err, len(idx.WeightMap))
			}
			for _, f := range idx.WeightMap {
				if _, err := os.Stat(filepath.Join(out, f)); err != nil {
					t.Fatalf("%s names %s: %v", n, f, err)
				}
			}
		case strings.HasSuffix(n, ".safetensors"):
			f, err := os.Open(filepath.Join(out, n))
			if err != nil {
				t.Fatal(err)
			}
			st, _ := f.Stat()
			_, err = ckpt.ParseSafetensorsHeader(f, st.Size(), n)
			f.Close()
			if err != nil {
				t.Fatalf("killed merge left an incomplete %s: %v", n, err)
			}
		case strings.HasPrefix(n, ".") && strings.Contains(n, ".ckptmerge-tmp-"):
		default:
			t.Fatalf("unexpected file %s", n)
		}
	}
}

func TestSIGKILLLeavesNoCompleteLookingOutput(t *testing.T) {
	bin := buildBinary(t)
	src := t.TempDir()
	synthckpt.HFShards(t, src, 16, 512, 2048, 4) // 64 MiB
	args := []string{"--quiet", "--no-kernel-copy", "--parallelism", "1", "--buffer-size", "65536", "--max-shard-size", "20MB", src}
	// how long does a whole run take?
	out := t.TempDir()
	start := time.Now()
	b, err := exec.Command(bin, append([]string{"--json"}, append(args, out)...)...).Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	full := time.Since(start)
	// memory is bounded by the buffers, not by the 64 MiB of tensors
	var sum struct {
		PeakRSS int64 `json:"peak_rss_bytes"`
	}
	if err := json.Unmarshal(b, &sum); err != nil || sum.PeakRSS == 0 {
		t.Fatalf("no peak_rss_bytes in --json output (%v):\n%s", err, b)
	}
	if sum.PeakRSS > 32<<20 {
		t.Errorf("peak RSS %d bytes merging 64 MiB with 64 KiB buffers, want < 32 MiB", sum.PeakRSS)
	}
	checkNoPartialOutput(t, out, true)
	killed := 0
	for i := 0; i < 6; i++ {
		out := t.TempDir()
		cmd := exec.Command(bin, append(args, out)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i) * full / 6)
		cmd.Process.Signal(syscall.SIGKILL)
		err := cmd.Wait()
		completed := err == nil
		if _, serr := os.Stat(filepath.Join(out, ckpt.IndexName)); !completed && serr == nil {
			// the kill came after the index (written last): a complete
			// output, which must hold every file the index names
			completed = true
		}
		if !completed {
			killed++
		}
		checkNoPartialOutput(t, out, completed)
		if !completed {
			// a rerun without --force is not blocked by leftovers of the killed run
			// unless final files exist; with --force it always completes
			if b, err := exec.Command(bin, append([]string{"--force", "--verify"}, append(args, out)...)...).CombinedOutput(); err != nil {
				t.Fatalf("rerun after kill: %v\n%s", err, b)
			}
			checkNoPartialOutput(t, out, true)
			if _, err := os.Stat(filepath.Join(out, ckpt.IndexName)); err != nil {
				t.Fatal("rerun wrote no index")
			}
			for _, e := range mustReadDir(t, out) {
				if strings.Contains(e, ".ckptmerge-tmp-") {
					t.Fatalf("rerun with --force left %s", e)
				}
			}
		}
	}
	if killed == 0 {
		t.Fatalf("no run was killed before it finished (a whole run takes %v)", full)
	}
}

func mustReadDir(t *testing.T, dir string) []string {
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

func TestS3InputAndOutput(t *testing.T) {
	srv := s3server.Start(t)
	bucket := srv.Bucket(t, "ckpt")
	srv.SetEnv(t)
	ctx := context.Background()
	src := filepath.Join(fixtures, "torch-1.13", "fsdp1-bf16-ws4")
	for _, n := range mustReadDir(t, src) {
		b, _ := os.ReadFile(filepath.Join(src, n))
		w, err := storage.Create(ctx, storage.Join(bucket, "run1/ckpt", n))
		if err != nil {
			t.Fatal(err)
		}
		w.Write(b)
		if err := w.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	ckptURL := storage.Join(bucket, "run1/ckpt")
	if code, stdout, stderr := run(t, "inspect", ckptURL); code != 0 || !strings.Contains(stdout, "21 tensors") {
		t.Fatalf("inspect s3: exit %d\n%s%s", code, stdout, stderr)
	}
	// s3 -> s3, sharded, verified
	outURL := storage.Join(bucket, "models/m1")
	if code, _, stderr := run(t, "--verify", "--max-shard-size", "20kB", ckptURL, outURL); code != 0 {
		t.Fatalf("s3 -> s3: exit %d\n%s", code, stderr)
	}
	infos, err := storage.List(ctx, outURL)
	if err != nil || len(infos) != 4 {
		t.Fatalf("s3 output: %v %v", infos, err)
	}
	// s3 -> local, one file, byte-identical
	out := t.TempDir()
	if code, _, stderr := run(t, ckptURL, out); code != 0 {
		t.Fatalf("s3 -> local: exit %d\n%s", code, stderr)
	}
	sameFile(t, filepath.Join(out, "model.safetensors"), filepath.Join(src, "expected.safetensors"))
	// local -> s3 over an existing model needs --force
	if code, _, stderr := run(t, src, outURL); code != 1 || !strings.Contains(stderr, "already exists") {
		t.Fatalf("existing s3 output: exit %d\n%s", code, stderr)
	}
	if code, _, stderr := run(t, "--force", src, outURL); code != 0 {
		t.Fatalf("--force to s3: exit %d\n%s", code, stderr)
	}
	infos, _ = storage.List(ctx, outURL)
	if len(infos) != 1 || !strings.HasSuffix(infos[0].Loc, "/model.safetensors") {
		t.Fatalf("after --force: %v", infos)
	}
	r, err := storage.Open(ctx, infos[0].Loc)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, r.Size())
	r.ReadAt(got, 0)
	r.Close()
	want, _ := os.ReadFile(filepath.Join(src, "expected.safetensors"))
	if !bytes.Equal(got, want) {
		t.Fatal("S3 output differs from expected.safetensors")
	}
}

// TestS3ServerGoneLeavesNothing kills the S3 server during a merge into
// it: the merge fails, and after a restart there is no index and every
// object under the output prefix is a complete safetensors file (each file
// is a multipart upload completed only on Commit; the shards the failed
// merge had committed could not be removed while the server was down).
func TestS3ServerGoneLeavesNothing(t *testing.T) {
	srv := s3server.Start(t)
	bucket := srv.Bucket(t, "gone")
	srv.SetEnv(t)
	src := t.TempDir()
	synthckpt.HFShards(t, src, 16, 512, 2048, 4) // 64 MiB
	outURL := storage.Join(bucket, "models/m")
	for _, delay := range []time.Duration{300 * time.Millisecond} {
		done := make(chan struct{})
		go func() {
			time.Sleep(delay)
			srv.Kill()
			close(done)
		}()
		code, _, stderr := run(t, "--parallelism", "1", "--buffer-size", "65536", "--max-shard-size", "10MB", src, outURL)
		<-done
		srv.Restart(t)
		infos, err := storage.List(context.Background(), outURL)
		if err != nil {
			t.Fatal(err)
		}
		if code == 0 {
			t.Logf("merge finished before the server was killed after %v", delay)
			storage.Remove(context.Background(), storage.Join(outURL, ckpt.IndexName))
			for _, in := range infos {
				storage.Remove(context.Background(), in.Loc)
			}
			continue
		}
		if code != 1 {
			t.Fatalf("exit %d, want 1\n%s", code, stderr)
		}
		for _, in := range infos {
			if strings.HasSuffix(in.Loc, ckpt.IndexName) {
				t.Fatalf("a failed merge left %s", in.Loc)
			}
		}
		for _, in := range infos {
			r, err := storage.Open(context.Background(), in.Loc)
			if err != nil {
				t.Fatal(err)
			}
			_, err = ckpt.ParseSafetensorsHeader(r, r.Size(), in.Loc)
			r.Close()
			if err != nil {
				t.Errorf("a failed merge left an incomplete object: %v", err)
			}
		}
		t.Logf("server killed after %v: %d complete shard(s) left, no index", delay, len(infos))
	}
}

// TestSIGINTExits130 interrupts a merge: exit status 130 and nothing left
// in the output directory, not even temporary files.
func TestSIGINTExits130(t *testing.T) {
	bin := buildBinary(t)
	src := t.TempDir()
	synthckpt.HFShards(t, src, 8, 512, 2048, 4) // 32 MiB
	interrupted := 0
	for _, delay := range []time.Duration{0, 20 * time.Millisecond} {
		out := t.TempDir()
		cmd := exec.Command(bin, "--no-kernel-copy", "--parallelism", "1", "--buffer-size", "16384", "--max-shard-size", "8MB", src, out)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// wait until the merge has started writing (its handler is set by then)
		for start := time.Now(); len(mustReadDir(t, out)) == 0 && time.Since(start) < 10*time.Second; {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(delay)
		cmd.Process.Signal(os.Interrupt)
		err := cmd.Wait()
		if err == nil {
			t.Logf("finished before the interrupt (delay %v)", delay)
			continue
		}
		interrupted++
		if code := cmd.ProcessState.ExitCode(); code != 130 {
			t.Fatalf("exit %d after SIGINT, want 130\n%s", code, stderr.String())
		}
		if left := mustReadDir(t, out); len(left) != 0 {
			t.Fatalf("interrupted merge left %v", left)
		}
	}
	if interrupted == 0 {
		t.Fatal("no run was interrupted")
	}
}
