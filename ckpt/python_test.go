package ckpt

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/pyenv"
)

// TestPyTorchReadsOutput reads every merged torch 1.13 fixture with numpy
// (header parsed with json) and compares each tensor with what the test
// venv's PyTorch (pyenv: the pinned torch 2.x) loads from the checkpoint
// with its own DCP reader, bit for bit; the --dtype casts are compared with
// torch's .to(dtype).
func TestPyTorchReadsOutput(t *testing.T) {
	py := pyenv.Python(t, "torch", "numpy")
	type run struct {
		dir   string
		dtype DType
	}
	var runs []run
	for _, d := range torch113Fixtures(t) {
		runs = append(runs, run{d, ""})
	}
	runs = append(runs,
		run{filepath.Join(fixtureRoot, "torch-1.13", "fsdp1-fp32-ws2"), BF16},
		run{filepath.Join(fixtureRoot, "torch-1.13", "fsdp1-fp32-ws2"), F16},
		run{filepath.Join(fixtureRoot, "torch-1.13", "mixed-ws4"), F32},
		run{filepath.Join(fixtureRoot, "torch-1.13", "mixed-ws4"), F16},
		run{filepath.Join(fixtureRoot, "torch-1.13", "mixed-ws4"), BF16},
	)
	args := []string{"testdata/check_with_torch.py"}
	for _, r := range runs {
		out, _ := mergeDir(t, r.dir, KeyOptions{}, PlanOptions{DType: r.dtype}, MergeOptions{})
		d := string(r.dtype)
		if d == "" {
			d = "keep"
		}
		args = append(args, r.dir, filepath.Join(out, "model.safetensors"), d)
	}
	b, err := exec.Command(py, args...).CombinedOutput()
	if err != nil || !strings.HasPrefix(string(b), "ok ") {
		t.Fatalf("python check failed: %v\n%s", err, b)
	}
	t.Logf("PyTorch agrees: %s", strings.TrimSpace(string(b)))

	// the check can fail: one flipped bit in a tensor is reported
	bad := filepath.Join(t.TempDir(), "model.safetensors")
	raw, err := os.ReadFile(args[2])
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)-3] ^= 0x10
	if err := os.WriteFile(bad, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	b, err = exec.Command(py, "testdata/check_with_torch.py", args[1], bad, args[3]).CombinedOutput()
	if err == nil || !strings.Contains(string(b), "values differ") {
		t.Fatalf("a corrupted file passed the python check: %v\n%s", err, b)
	}
}
