// Package pyenv finds the pinned Python test environment (the venv that
// scripts/setup-test-deps builds from python/requirements-test.lock, with
// torch, transformers, pyarrow, datasets, safetensors and tokenizers) for Go
// tests that check ferry's output with the real Python libraries.
//
// The interpreter is $FERRY_PYTHON (`make test` exports it); without it,
// $FERRY_CACHE/venv/bin/python, then $HOME/.cache/ferry/venv/bin/python. A
// missing interpreter or module fails the test under FERRY_REQUIRE_TOOLS=1
// (as in `make test`) and skips it otherwise.
package pyenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Path returns the interpreter path this package would use, whether or not
// it exists.
func Path() string {
	if p := os.Getenv("FERRY_PYTHON"); p != "" {
		return p
	}
	cache := os.Getenv("FERRY_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "ferry")
	}
	return filepath.Join(cache, "venv", "bin", "python")
}

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
