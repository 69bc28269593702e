package pyenv

import "testing"

func TestPath(t *testing.T) {
	t.Setenv("HOME", "/h")
	t.Setenv("FERRY_CACHE", "")
	t.Setenv("FERRY_PYTHON", "")
	if got, want := Path(), "/h/.cache/ferry/venv/bin/python"; got != want {
		t.Errorf("no env: %q, want %q", got, want)
	}
	t.Setenv("FERRY_CACHE", "/c")
	if got, want := Path(), "/c/venv/bin/python"; got != want {
		t.Errorf("FERRY_CACHE: %q, want %q", got, want)
	}
	t.Setenv("FERRY_PYTHON", "/p/python3")
	if got, want := Path(), "/p/python3"; got != want {
		t.Errorf("FERRY_PYTHON: %q, want %q", got, want)
	}
}
