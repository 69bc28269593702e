// Package pyenv finds the pinned Python test environment (the venv that
// scripts/setup-test-deps builds from python/requirements-test.lock, with
// torch, transformers, pyarrow, datasets, safetensors and tokenizers) for Go
// tests that check ferry's output with the real Python libraries.
//
// The interpreter is internal/pyenv.Path ($FERRY_PYTHON, which `make test`
// exports, else the venv under $FERRY_CACHE or ~/.cache/ferry). A
// missing interpreter or module fails the test under FERRY_REQUIRE_TOOLS=1
// (as in `make test`) and skips it otherwise.
package pyenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/ferryml/ferry/internal/pyenv"
)

// Path is internal/pyenv.Path: $FERRY_PYTHON, else the venv under
// $FERRY_CACHE or ~/.cache/ferry.
func Path() string { return pyenv.Path() }

// Python returns the test venv's interpreter after checking that it imports
// every module named (for example "torch", "pyarrow").
func Python(t testing.TB, modules ...string) string {
	t.Helper()
	py := Path()
	imports := "import sys"
	if len(modules) > 0 {
		imports = "import " + strings.Join(modules, ", ")
	}
	out, err := exec.Command(py, "-c", imports).CombinedOutput()
	if err == nil {
		return py
	}
	msg := "needs " + py + " importing " + strings.Join(modules, ", ") +
		" (scripts/setup-test-deps builds that venv): " + strings.TrimSpace(string(out))
	if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg + "; skipped (FERRY_REQUIRE_TOOLS=1 makes this a failure)")
	return ""
}
