package version

import (
	"strings"
	"testing"
)

func TestString(t *testing.T) {
	old, oldCommit := Version, Commit
	defer func() { Version, Commit = old, oldCommit }()
	Version, Commit = "1.2.3", "0123456789ab"
	if s := String("ckptmerge"); !strings.HasPrefix(s, "ckptmerge 1.2.3 (commit 0123456789ab, go") {
		t.Fatalf("String = %q", s)
	}
	for args, want := range map[string]bool{"--version": true, "-version": true, "--version x": false, "": false, "--help": false} {
		if got := Requested(strings.Fields(args)); got != want {
			t.Errorf("Requested(%q) = %v, want %v", args, got, want)
		}
	}
}
