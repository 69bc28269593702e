package ckpt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"
)

const fixtureRoot = "../testdata/dcp"

func torch113Fixtures(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(fixtureRoot, "torch-1.13", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	if len(out) != 5 {
		t.Fatalf("found %d torch-1.13 fixtures, want 5", len(out))
	}
	return out
}

// mergeDir merges a checkpoint directory with default options into a new
// temporary directory and returns it.
func mergeDir(t *testing.T, dir string, ko KeyOptions, po PlanOptions, mo MergeOptions) (string, *Result) {
	t.Helper()
	ctx := context.Background()
	ck, err := OpenDir(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	sel, skip, err := SelectTensors(ck.Meta, ko)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(sel, skip, po)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	res, err := Merge(ctx, ck, p, DirSink(out), mo)
	if err != nil {
		t.Fatal(err)
	}
	return out, res
}

func TestTorch113FixturesByteIdentical(t *testing.T) {
	for _, dir := range torch113Fixtures(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			for _, par := range []int{1, 3} {
				for _, buf := range []int{0, 64, 200} {
					out, _ := mergeDir(t, dir, KeyOptions{}, PlanOptions{}, MergeOptions{Parallelism: par, BufferSize: buf, Verify: true})
					got, err := os.ReadFile(filepath.Join(out, "model.safetensors"))
					if err != nil {
						t.Fatal(err)
					}
					want, err := os.ReadFile(filepath.Join(dir, "expected.safetensors"))
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("parallelism %d buffer %d: output (%d bytes) differs from expected.safetensors (%d bytes)", par, buf, len(got), len(want))
					}
				}
			}
		})
	}
}

func TestTorch2LayoutFixtures(t *testing.T) {
	for _, name := range []string{"torch2-ws4", "torch2-st-ws2", "hf-sharded-ws4"} {
		t.Run(name, func(t *testing.T) {
			dir := filepath.Join(fixtureRoot, name)
			out, res := mergeDir(t, dir, KeyOptions{}, PlanOptions{}, MergeOptions{Verify: true, Parallelism: 2, BufferSize: 96})
			got, err := os.ReadFile(filepath.Join(out, "model.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join(dir, "expected.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("output (%d bytes) differs from expected.safetensors (%d bytes)", len(got), len(want))
			}
			if !res.Verified || len(res.Tensors) != 24 {
				t.Fatalf("verified=%v tensors=%d, want true and 24", res.Verified, len(res.Tensors))
			}
			truth := readExpectedJSON(t, dir)
			for _, tr := range res.Tensors {
				if w, ok := truth[tr.Name]; !ok || w != tr.SHA256 {
					t.Errorf("tensor %q: sha256 %s, expected.json says %q", tr.Name, tr.SHA256, w)
				}
			}
		})
	}
}

func TestIncludeOptimizer(t *testing.T) {
	dir := filepath.Join(fixtureRoot, "torch2-ws4")
	_, res := mergeDir(t, dir, KeyOptions{IncludeOptimizer: true}, PlanOptions{}, MergeOptions{Verify: true})
	truth := readExpectedJSON(t, dir)
	n := 0
	for _, tr := range res.Tensors {
		if w := truth[tr.Name]; w != tr.SHA256 {
			t.Errorf("tensor %q: sha256 %s, expected.json says %q", tr.Name, tr.SHA256, w)
		}
		if strings.HasPrefix(tr.Name, "optimizer.") {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d optimizer tensors written, want 3", n)
	}
	for _, s := range res.Skipped {
		if !strings.Contains(s.Reason, "bytes") {
			t.Errorf("skipped %q (%s), only bytes items should be", s.Key, s.Reason)
		}
	}
}

func readExpectedJSON(t *testing.T, dir string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Entries []struct {
			Key    string `json:"key"`
			SHA256 string `json:"sha256"`
		} `json:"entries"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range m.Entries {
		out[e.Key] = e.SHA256
	}
	return out
}

func TestRejectUnknownTransform(t *testing.T) {
	_, err := OpenDir(context.Background(), filepath.Join(fixtureRoot, "torch2-rot13"))
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "stream.rot13/1") || !strings.Contains(err.Error(), `tensor "w"`) {
		t.Fatalf("err = %v, want ErrUnsupported naming the transform and the tensor", err)
	}
}

// TestIndependentGoReader opens every output with nlpodyssey/safetensors
// and compares each tensor's dtype, shape and bytes with expected.json.
func TestIndependentGoReader(t *testing.T) {
	dirs := torch113Fixtures(t)
	for _, n := range torch26Fixtures {
		dirs = append(dirs, filepath.Join(fixtureRoot, n))
	}
	for _, dir := range dirs {
		out, _ := mergeDir(t, dir, KeyOptions{}, PlanOptions{MaxShardSize: 8000}, MergeOptions{})
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		b, err := os.ReadFile(filepath.Join(out, IndexName))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			t.Fatal(err)
		}
		var expected struct {
			Entries []struct {
				Key, Kind, Dtype, Sha256 string
				Shape                    []uint64
			} `json:"entries"`
		}
		b, _ = os.ReadFile(filepath.Join(dir, "expected.json"))
		if err := json.Unmarshal(b, &expected); err != nil {
			t.Fatal(err)
		}
		opened := map[string]safetensors.SafeTensors{}
		n := 0
		for _, e := range expected.Entries {
			if e.Kind != "tensor" {
				continue
			}
			n++
			file, ok := idx.WeightMap[e.Key]
			if !ok {
				t.Fatalf("%s: %q missing from the index", dir, e.Key)
			}
			st, ok := opened[file]
			if !ok {
				raw, err := os.ReadFile(filepath.Join(out, file))
				if err != nil {
					t.Fatal(err)
				}
				if st, err = safetensors.Deserialize(raw); err != nil {
					t.Fatalf("%s/%s: nlpodyssey/safetensors: %v", out, file, err)
				}
				opened[file] = st
			}
			tv, ok := st.Tensor(e.Key)
			if !ok {
				t.Fatalf("%s: %q not in %s", dir, e.Key, file)
			}
			sum := sha256.Sum256(tv.Data())
			if tv.DType().String() != e.Dtype || fmt.Sprint(tv.Shape()) != fmt.Sprint(e.Shape) || hex.EncodeToString(sum[:]) != e.Sha256 {
				t.Errorf("%s: %q: got %s %v, want %s %v (or bytes differ)", dir, e.Key, tv.DType(), tv.Shape(), e.Dtype, e.Shape)
			}
		}
		if n != len(idx.WeightMap) {
			t.Errorf("%s: index has %d tensors, want %d", dir, len(idx.WeightMap), n)
		}
	}
}

// torch26Fixtures are real checkpoints written by torch 2.6 (FSDP2
// fully_shard, FSDP2 + tensor parallel) on CPU, whose ground truth is
// torch's own dcp_to_torch_save written out by safetensors.torch.save_file
// (testdata/dcp/make-torch26-fixtures.py).
var torch26Fixtures = []string{"torch26-fsdp2-bf16-ws4", "torch26-fsdp2-fp32-ws3-t2", "torch26-fsdp2tp-bf16-2x2"}

func TestTorch26RealCheckpoints(t *testing.T) {
	for _, name := range torch26Fixtures {
		dir := filepath.Join(fixtureRoot, name)
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile(filepath.Join(dir, "expected.safetensors"))
			if err != nil {
				t.Fatal(err)
			}
			for _, wp := range writePaths {
				for _, buf := range []int{0, 100, 5000} {
					mo := wp.mo
					mo.Parallelism, mo.BufferSize, mo.Verify = 3, buf, true
					out, _ := mergeDir(t, dir, KeyOptions{}, PlanOptions{}, mo)
					got, err := os.ReadFile(filepath.Join(out, "model.safetensors"))
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Fatalf("%s, buffer %d: output (%d bytes) differs from torch's consolidation (%d bytes)", wp.name, buf, len(got), len(want))
					}
				}
			}
			// every tensor, optimizer state included, against torch's sha256
			_, res := mergeDir(t, dir, KeyOptions{IncludeOptimizer: true}, PlanOptions{}, MergeOptions{Verify: true})
			truth := readExpectedJSON(t, dir)
			if len(res.Tensors) != len(truth) {
				t.Fatalf("%d tensors written with the optimizer state, expected.json lists %d", len(res.Tensors), len(truth))
			}
			for _, tr := range res.Tensors {
				if w, ok := truth[tr.Name]; !ok || w != tr.SHA256 {
					t.Errorf("tensor %q: sha256 %s, expected.json says %q", tr.Name, tr.SHA256, w)
				}
			}
			for _, s := range res.Skipped {
				if !strings.Contains(s.Reason, "bytes") {
					t.Errorf("skipped %q (%s), only bytes items should be", s.Key, s.Reason)
				}
			}
		})
	}
}

// TestTorch215AppStateNames: the .metadata of a real torch 2.15 checkpoint
// in the layout of PyTorch's distributed-checkpoint recipe,
// dcp.save({"app": AppState}) with AppState.state_dict() = {"model": ...,
// "optim": ...} from get_state_dict (FSDP1 on 2 ranks, a tiny Llama). The
// model tensors get their Hugging Face names; the optimizer state stays
// out. Made with the test venv's python as PY:
//
//	PY -m torch.distributed.run --nproc_per_node=2 python/tests/dcp_workers/save_checkpoints.py --out OUT --jobs llama-fsdp1
//	cp OUT/llama-fsdp1/app-state/.metadata ckpt/testdata/torch2.15-app-state-fsdp1-ws2.metadata
func TestTorch215AppStateNames(t *testing.T) {
	const name = "testdata/torch2.15-app-state-fsdp1-ws2.metadata"
	raw, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	md, err := ParseMetadata(raw, name)
	if err != nil {
		t.Fatal(err)
	}
	if !md.HasPlannerData || md.Version == "" {
		t.Fatalf("planner_data %v, version %q: want both", md.HasPlannerData, md.Version)
	}
	sel, skipped, err := SelectTensors(md, KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sel) != 21 {
		t.Fatalf("%d tensors selected, want the model's 21", len(sel))
	}
	for _, s := range sel {
		if !strings.HasPrefix(s.Name, "model.") && s.Name != "lm_head.weight" {
			t.Errorf("%q named %q, want a Hugging Face name", s.Item.Key, s.Name)
		}
		if s.Name != strings.TrimPrefix(s.Item.Key, "app.model.") {
			t.Errorf("%q named %q", s.Item.Key, s.Name)
		}
	}
	reasons := map[string]int{}
	for _, s := range skipped {
		reasons[s.Reason]++
	}
	if reasons["training state (use --include-optimizer)"] != 3*21 || len(skipped) != 3*21+reasons["bytes item (not a tensor)"] {
		t.Fatalf("skipped %v, want exp_avg, exp_avg_sq and step of 21 parameters as training state", reasons)
	}
	sel, _, err = SelectTensors(md, KeyOptions{IncludeOptimizer: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(sel) != 4*21 || sel[21].Name != "optim.state.lm_head.weight.exp_avg" {
		t.Fatalf("with the optimizer: %d tensors (want %d), the 22nd named %q", len(sel), 4*21, sel[21].Name)
	}
}
