package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/ferryml/ferry"

// pkg is the part of `go list -json` output the rules read.
type pkg struct {
	ImportPath   string
	Name         string
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// under reports whether path is dir (a path relative to the module root)
// or a package below it.
func under(path, dir string) bool {
	p := module + "/" + dir
	return path == p || strings.HasPrefix(path, p+"/")
}

// violations returns one line per forbidden import in pkgs, sorted.
func violations(pkgs []pkg) []string {
	var out []string
	bad := func(p pkg, imp, rule string) {
		out = append(out, fmt.Sprintf("%s imports %s: %s", p.ImportPath, imp, rule))
	}
	for _, p := range pkgs {
		all := slices.Concat(p.Imports, p.TestImports, p.XTestImports)
		for _, imp := range all {
			switch {
			case imp == p.ImportPath: // its external test package
			case under(imp, "cmd"):
				bad(p, imp, "nothing imports a command (cmd/…); move what it shares into a library")
			case under(imp, "serve") && p.Name != "main" && !under(p.ImportPath, "serve"):
				bad(p, imp, "libraries never import serve (the daemon builds on them, not the other way round)")
			}
		}
		if under(p.ImportPath, "tokenize") {
			for _, imp := range p.Imports {
				if (imp == module || strings.HasPrefix(imp, module+"/")) && !under(imp, "tokenize") {
					bad(p, imp, "tokenize imports nothing of ferry outside tokenize/")
				}
			}
		}
		for _, imp := range p.Imports { // the package's own code; its tests may use any helper
			switch {
			case under(imp, "internal/cli") && !under(p.ImportPath, "cmd") && !under(p.ImportPath, "bench") && !under(p.ImportPath, "internal/cli"):
				bad(p, imp, "internal/cli is for commands (cmd/…) and bench only; libraries return errors, they do not exit")
			case under(imp, "internal/testutil") && p.Name != "main" && !under(p.ImportPath, "internal/testutil"):
				bad(p, imp, "internal/testutil is for tests and fixture mains only")
			}
		}
		if slices.Contains(all, "unsafe") && !strings.Contains(p.ImportPath, "/internal/") {
			bad(p, "unsafe", "unsafe only under internal/, with a safe twin (tokenize/internal/bytestr)")
		}
		if under(p.ImportPath, "chattemplate") {
			for _, imp := range p.Imports {
				if (imp == module || strings.HasPrefix(imp, module+"/")) && !under(imp, "chattemplate") {
					bad(p, imp, "chattemplate imports nothing of ferry outside chattemplate/")
				}
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// list runs `go list -json` over the whole module, tests included.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Name,Imports,TestImports,XTestImports", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestLayering(t *testing.T) {
	pkgs := list(t)
	names := map[string]bool{}
	for _, p := range pkgs {
		names[p.ImportPath] = true
	}
	// The rules must see the packages they are about.
	for _, want := range []string{"serve", "shard", "tokenize", "ckpt", "cmd/ferry-serve", "cmd/dataprep"} {
		if !names[module+"/"+want] {
			t.Fatalf("go list did not list %s/%s; %d packages", module, want, len(pkgs))
		}
	}
	for _, v := range violations(pkgs) {
		t.Error(v)
	}
}

// TestRules checks the rules themselves on a made-up graph.
func TestRules(t *testing.T) {
	m := func(s string) string { return module + "/" + s }
	pkgs := []pkg{
		{ImportPath: m("cmd/ferry-serve"), Name: "main", Imports: []string{m("serve"), m("shard")}},
		{ImportPath: m("serve"), Name: "serve", Imports: []string{m("shard")}, XTestImports: []string{m("serve")}},
		{ImportPath: m("bench/cmd/bench"), Name: "main", Imports: []string{m("serve")}},
		{ImportPath: m("shard"), Name: "shard", Imports: []string{m("internal/mmap")}, TestImports: []string{m("serve")}},
		{ImportPath: m("ckpt"), Name: "ckpt", Imports: []string{m("cmd/ckptmerge/util")}},
		{ImportPath: m("internal/testutil/x"), Name: "x", Imports: []string{m("serve/sub")}},
		{ImportPath: m("tokenize"), Name: "tokenize", Imports: []string{m("tokenize/internal/uclass"), m("internal/mmap"), "golang.org/x/text"},
			TestImports: []string{m("internal/testutil/pyenv")}},
		{ImportPath: m("tokenize/internal/uclass"), Name: "uclass", Imports: []string{m("shard")}},
		{ImportPath: m("cmd/dataprep"), Name: "main", Imports: []string{m("internal/cli")}},
		{ImportPath: m("bench/cmd/bench"), Name: "main", Imports: []string{m("internal/cli"), m("internal/testutil/s3server")}},
		{ImportPath: m("internal/storage"), Name: "storage", TestImports: []string{m("internal/cli"), m("internal/testutil/s3server")}},
		{ImportPath: m("internal/prep"), Name: "prep", Imports: []string{m("internal/cli"), m("internal/testutil/synth")}},
		{ImportPath: m("tokenize/internal/bytestr"), Name: "bytestr", Imports: []string{"unsafe"}},
		{ImportPath: m("shard"), Name: "shard", XTestImports: []string{"unsafe"}},
	}
	want := []string{
		m("ckpt") + " imports " + m("cmd/ckptmerge/util"),
		m("internal/prep") + " imports " + m("internal/cli"),
		m("internal/prep") + " imports " + m("internal/testutil/synth"),
		m("internal/testutil/x") + " imports " + m("serve/sub"),
		m("shard") + " imports " + m("serve"),
		m("shard") + " imports unsafe",
		m("tokenize") + " imports " + m("internal/mmap"),
		m("tokenize/internal/uclass") + " imports " + m("shard"),
	}
	got := violations(pkgs)
	if len(got) != len(want) {
		t.Fatalf("got %d violations, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]+":") {
			t.Errorf("violation %d: %s\nwant %s: …", i, got[i], want[i])
		}
	}
}

// isS3Calls returns file:line for every call of storage.IsS3 in the
// non-test Go files under root outside internal/storage: the s3:// decision
// is the location layer's (storage.LocalPath and the rest), nobody else's.
func isS3Calls(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "internal/storage" || rel != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "python") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "storage.IsS3(") {
				out = append(out, fmt.Sprintf("%s:%d", rel, i+1))
			}
		}
		return nil
	})
	return out, err
}

func TestNoIsS3OutsideStorage(t *testing.T) {
	calls, err := isS3Calls(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range calls {
		t.Errorf("%s calls storage.IsS3: ask the location layer (storage.LocalPath, Glob, ListNames, Fetch, Stage) instead", c)
	}
	// The scan itself: it finds a call in a made-up tree, not in tests or
	// in internal/storage.
	root := t.TempDir()
	for name, src := range map[string]string{
		"a/a.go":                "package a\nfunc f(l string) bool { return storage.IsS3(l) }\n",
		"a/a_test.go":           "package a\nvar _ = storage.IsS3(\"x\")\n",
		"internal/storage/x.go": "package storage\nvar _ = storage.IsS3(\"x\")\n",
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := isS3Calls(root); err != nil || !slices.Equal(got, []string{"a/a.go:2"}) {
		t.Errorf("scan of a made-up tree: %v, %v; want [a/a.go:2]", got, err)
	}
}
