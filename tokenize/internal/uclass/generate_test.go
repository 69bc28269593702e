package uclass

import (
	"bytes"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGenerateUpToDate regenerates tables.go and wants it unchanged, so the
// checked-in tables always match the checked-in source and generator.
func TestGenerateUpToDate(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "tables.go")
	cmd := exec.Command(goBin, "run", "gen.go", "-in", "../../../testdata/tokenizers/onig-unicode-classes.txt", "-out", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run gen.go: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("tables.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("tables.go is stale: run go generate ./tokenize/internal/uclass")
	}
}

// TestGenerateCatUpToDate is TestGenerateUpToDate for cattables.go.
func TestGenerateCatUpToDate(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "cattables.go")
	cmd := exec.Command(goBin, "run", "gencat.go", "-in", "../../../testdata/tokenizers/onig-unicode-categories.txt", "-out", out)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run gencat.go: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile("cattables.go")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("cattables.go is stale: run go generate ./tokenize/internal/uclass")
	}
}
