package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
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
	}
	want := []string{
		m("ckpt") + " imports " + m("cmd/ckptmerge/util"),
		m("internal/testutil/x") + " imports " + m("serve/sub"),
		m("shard") + " imports " + m("serve"),
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
