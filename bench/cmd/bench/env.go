package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/ferryml/ferry/bench/internal/harness"
)

// env is what the jobs need to know about the machine: where things are,
// which tools exist, and the ferry binaries built from this tree.
type env struct {
	ctx   context.Context
	c     *config
	logf  func(string, ...any)
	bin   string            // built ferry binaries
	built map[string]string // cmd name → binary path, or "" when the build failed
	why   map[string]string // cmd name → why it is not available
	tools map[string]string // tool → version ("" = missing)
}

func newEnv(ctx context.Context, c *config, logf func(string, ...any)) *env {
	e := &env{ctx: ctx, c: c, logf: logf, bin: filepath.Join(c.work, "bin"),
		built: map[string]string{}, why: map[string]string{}, tools: map[string]string{}}
	e.tools["python"] = firstLine(e.output(c.python, "--version"))
	// The anchors' modules: tokenizers is imported (the tokenizer jobs run
	// it), the others are looked up (a broken torch fails its jobs instead).
	for k, v := range pythonVersions(e, "+tokenizers", "transformers", "torch", "+numpy", "accelerate", "datasets") {
		e.tools[k] = v
	}
	e.anchorVersions()
	e.tools["cp"] = firstLine(e.output("cp", "--version"))
	e.tools["dd"] = firstLine(e.output("dd", "--version"))
	e.tools["versitygw"] = versitygwVersion(e)
	return e
}

// output runs a short command and returns its stdout, or "" when it fails.
func (e *env) output(name string, args ...string) string {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// outputEnv is output with extra KEY=VALUE entries in the environment.
func (e *env) outputEnv(extra []string, name string, args ...string) string {
	out, _ := e.outputOK(extra, append([]string{name}, args...)...)
	return strings.TrimSpace(out)
}

// outputOK runs argv (no time limit: conversions take minutes) with extra
// environment entries and returns its combined output and whether it
// exited 0.
func (e *env) outputOK(extra []string, argv ...string) (string, bool) {
	cmd := exec.CommandContext(e.ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), extra...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err == nil
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// pythonModules prints, as one JSON object, the installed version of every
// distribution named in argv ("" when it is not installed); a name with a
// leading "+" is also imported, and reported "" when that fails. Only what
// is cheap to import is imported: importing torch costs seconds of CPU.
const pythonModules = `import importlib, importlib.metadata, json, sys
v = {}
for a in sys.argv[1:]:
    m = a.lstrip("+")
    try:
        v[m] = importlib.metadata.version(m)
        if a.startswith("+"):
            importlib.import_module(m)
    except Exception:
        v[m] = ""
print(json.dumps(v))`

// pythonVersions asks the -python interpreter, in one process, for the
// versions of modules (see pythonModules for the "+" prefix) and returns
// module → version ("" = missing or broken).
func pythonVersions(e *env, modules ...string) map[string]string {
	out := map[string]string{}
	for _, m := range modules {
		out[strings.TrimPrefix(m, "+")] = ""
	}
	b := e.output(e.c.python, append([]string{"-c", pythonModules}, modules...)...)
	if b == "" {
		return out
	}
	var v map[string]string
	if json.Unmarshal([]byte(lastLine(b)), &v) != nil {
		return out
	}
	for m := range out {
		out[m] = v[m]
	}
	return out
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

func versitygwVersion(e *env) string {
	path := lookTool("versitygw")
	if path == "" {
		return ""
	}
	v := e.output(path, "--version")
	if v == "" {
		return "present (" + path + ")"
	}
	return strings.Join(strings.Fields(v), " ")
}

// lookTool finds a program on PATH or in $(go env GOPATH)/bin, where
// scripts/setup-test-deps installs versitygw.
func lookTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		gopath = filepath.Join(homeDir(), "go")
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		gopath = strings.TrimSpace(string(out))
	}
	p := filepath.Join(gopath, "bin", name)
	if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
		return p
	}
	return ""
}

// goBuild builds ./PKG from this tree into the work dir once and returns the
// binary, or "" and the reason when it cannot be built. Building here (not
// trusting bin/) makes sure the benchmark measures the code in the tree.
func (e *env) goBuild(pkg string) (string, string) {
	if p, ok := e.built[pkg]; ok {
		return p, e.why[pkg]
	}
	name := filepath.Base(pkg)
	if e.c.binDir != "" {
		p := filepath.Join(e.c.binDir, name)
		if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
			e.built[pkg], e.why[pkg] = "", fmt.Sprintf("%s does not exist (-bin %s)", p, e.c.binDir)
			return "", e.why[pkg]
		}
		e.built[pkg] = p
		return p, ""
	}
	out := filepath.Join(e.bin, name)
	if _, err := os.Stat(filepath.Join(pkg)); err != nil {
		e.built[pkg], e.why[pkg] = "", fmt.Sprintf("./%s does not exist (run from the repository root)", pkg)
		return "", e.why[pkg]
	}
	ctx, cancel := context.WithTimeout(e.ctx, 10*time.Minute)
	defer cancel()
	e.logf("go build ./%s", pkg)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./"+pkg)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		e.built[pkg], e.why[pkg] = "", fmt.Sprintf("go build ./%s failed: %s", pkg, oneLine(msg, 200))
		return "", e.why[pkg]
	}
	e.built[pkg] = out
	return out, ""
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "…"
	}
	return s
}

// helpText returns what `prog args... --help` prints (stdout and stderr).
func (e *env) helpText(prog string, args ...string) string {
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	out, _ := exec.CommandContext(ctx, prog, append(args, "--help")...).CombinedOutput()
	return string(out)
}

// hfTokenizers says why the HF tokenizers anchor cannot run, or "".
func (e *env) hfTokenizers() string {
	if e.tools["tokenizers"] == "" {
		return e.c.python + " cannot import tokenizers (scripts/setup-test-deps builds the venv; -python or $FERRY_PYTHON picks another)"
	}
	return ""
}

// torch says why the PyTorch anchors cannot run, or "".
func (e *env) torch() string {
	if e.tools["torch"] == "" {
		return e.c.python + " has no torch (scripts/setup-test-deps builds the venv; -python or $FERRY_PYTHON picks another)"
	}
	return ""
}

func (e *env) machine() harness.Machine {
	host, _ := os.Hostname()
	m := harness.Machine{
		Host: host, OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU(),
		CPUModel: cpuModel(), MemTotalBytes: memTotal(), Go: runtime.Version(),
		Tools: map[string]string{}, LoadAvgStart: loadAvg(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	for k, v := range e.tools {
		if v == "" {
			v = "missing"
		}
		m.Tools[k] = trimToolName(k, v)
	}
	m.GitCommit = e.output("git", "rev-parse", "--short=12", "HEAD")
	if m.GitCommit != "" && e.output("git", "status", "--porcelain", "--untracked-files=no") != "" {
		m.GitCommit += "+dirty"
	}
	return m
}

// trimToolName drops a leading program name from a version line
// ("cp (GNU coreutils) 9.1" → "(GNU coreutils) 9.1", "Python 3.11.2" → "3.11.2").
func trimToolName(tool, v string) string {
	if len(v) > len(tool) && strings.EqualFold(v[:len(tool)], tool) && v[len(tool)] == ' ' {
		return strings.TrimSpace(v[len(tool):])
	}
	return v
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		var kb int64
		if n, _ := fmt.Sscanf(line, "MemTotal: %d kB", &kb); n == 1 {
			return kb * 1024
		}
	}
	return 0
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
