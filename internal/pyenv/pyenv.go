// Package pyenv names the pinned Python environment that
// scripts/setup-test-deps builds from python/requirements-test.lock (torch,
// transformers, tokenizers, pyarrow, ...): the interpreter the tests and the
// benchmarks' anchors run with.
package pyenv

import (
	"os"
	"path/filepath"
)

// Path is $FERRY_PYTHON when set (`make test` and `make bench` set it),
// else $FERRY_CACHE/venv/bin/python, else ~/.cache/ferry/venv/bin/python.
// It does not check that the file exists.
func Path() string {
	if p := os.Getenv("FERRY_PYTHON"); p != "" {
		return p
	}
	cache := os.Getenv("FERRY_CACHE")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "/root"
		}
		cache = filepath.Join(home, ".cache", "ferry")
	}
	return filepath.Join(cache, "venv", "bin", "python")
}
