package arrowcheck

import (
	"bufio"
	"crypto/sha256"
	_ "embed"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/pyenv"
	"github.com/ferryml/ferry/shard"
)

//go:embed check_shards.py
var script []byte

// Shard is what ferry's Go reader read from one shard file.
type Shard struct {
	Path    string            `json:"path"` // absolute
	Meta    map[string]string `json:"meta"` // schema metadata, ferry.* keys
	Batches []Batch           `json:"batches"`
}

// Batch is one record batch as the Go reader read it.
type Batch struct {
	Rows   int               `json:"rows"`
	SHA256 map[string]string `json:"sha256"` // column → SHA-256 of its little-endian values
}

// ErrMissing marks a run that could not be made: no interpreter, or it
// cannot import pyarrow or numpy.
var ErrMissing = errors.New("arrowcheck: pyarrow is not available")

// Expect reads every shard listed in dir/manifest.json with shard.Open.
func Expect(t testing.TB, dir string) []Shard {
	t.Helper()
	m, err := shard.ReadManifest(dir)
	if err != nil {
		t.Fatalf("arrowcheck: %v", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]Shard, 0, len(m.Files))
	for _, fe := range m.Files {
		path := filepath.Join(abs, fe.Path)
		r, err := shard.Open(path)
		if err != nil {
			t.Fatalf("arrowcheck: ferry's reader: %v", err)
		}
		out = append(out, fromReader(path, r))
		r.Close()
	}
	return out
}

func fromReader(path string, r *shard.Reader) Shard {
	fm := r.Meta()
	s := Shard{Path: path, Meta: map[string]string{
		shard.MetaFormat:    shard.FormatName,
		shard.MetaVersion:   strconv.Itoa(fm.Version()),
		shard.MetaRank:      strconv.Itoa(fm.Rank),
		shard.MetaRanks:     strconv.Itoa(fm.Ranks),
		shard.MetaSeqLen:    strconv.Itoa(fm.SeqLen),
		shard.MetaMode:      string(fm.Mode),
		shard.MetaLabels:    string(fm.Labels),
		shard.MetaTokenizer: fm.TokenizerSHA256,
	}}
	var buf []byte
	h32 := func(v []int32) string {
		buf = buf[:0]
		for _, x := range v {
			buf = binary.LittleEndian.AppendUint32(buf, uint32(x))
		}
		sum := sha256.Sum256(buf)
		return hex.EncodeToString(sum[:])
	}
	h64 := func(v []int64) string {
		buf = buf[:0]
		for _, x := range v {
			buf = binary.LittleEndian.AppendUint64(buf, uint64(x))
		}
		sum := sha256.Sum256(buf)
		return hex.EncodeToString(sum[:])
	}
	for i := range r.NumBatches() {
		b := r.Batch(i)
		cols := map[string]string{
			shard.ColInputIDs:  h32(b.InputIDs),
			shard.ColLabels:    h32(b.Labels),
			shard.ColLength:    h32(b.Length),
			"segments.offsets": h32(b.SegOffsets),
			"segments.sample":  h64(b.SegSample),
			"segments.start":   h32(b.SegStart),
			"segments.length":  h32(b.SegLength),
		}
		if fm.Mode == shard.ModePack {
			cols[shard.ColPositionIDs] = h32(b.PositionIDs)
		}
		if fm.Sources {
			cols["segments.source"] = h32(b.SegSource)
		}
		s.Batches = append(s.Batches, Batch{Rows: b.Rows, SHA256: cols})
	}
	return s
}

// Check runs the checker over dirs, comparing with expect (what ferry's Go
// reader read; nil compares with the plain-file reader, the manifest and the
// format's rules only). It returns the checker's report, and an error when
// the checker found a problem (the report says which) or could not run
// (ErrMissing when there is no interpreter or it lacks pyarrow or numpy).
func Check(t testing.TB, dirs []string, expect []Shard) (string, error) {
	t.Helper()
	abs := make([]string, len(dirs))
	for i, d := range dirs {
		a, err := filepath.Abs(d)
		if err != nil {
			return "", err
		}
		abs[i] = a
	}
	req, err := json.Marshal(struct {
		Dirs   []string `json:"dirs"`
		Expect []Shard  `json:"expect"`
	}{abs, expect})
	if err != nil {
		return "", err
	}
	shared.Lock()
	defer shared.Unlock()
	if shared.err != nil {
		return "", shared.err
	}
	if shared.s == nil {
		s, err := start()
		if errors.Is(err, ErrMissing) {
			shared.err = err // no use trying again in this test binary
		}
		if err != nil {
			return "", err
		}
		shared.s = s
	}
	reply, err := shared.s.ask(req)
	if err != nil {
		shared.s = nil // a new process for the next check
		return "", err
	}
	if !reply.OK {
		return reply.Report, fmt.Errorf("arrowcheck: pyarrow disagrees with ferry:\n%s", reply.Report)
	}
	return reply.Report, nil
}

// shared is the checker process of this test binary.
var shared struct {
	sync.Mutex
	s   *server
	err error // sticky ErrMissing
}

type server struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *tail
}

type reply struct {
	OK     bool   `json:"ok"`
	Report string `json:"report"`
}

// start runs check_shards.py --serve and waits for its ready line.
func start() (*server, error) {
	py := pyenv.Path()
	if _, err := os.Stat(py); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMissing, err)
	}
	dir, err := os.MkdirTemp("", "ferry-arrowcheck-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir) // Python has read the script once it is ready
	sp := filepath.Join(dir, "check_shards.py")
	if err := os.WriteFile(sp, script, 0o644); err != nil {
		return nil, err
	}
	cmd := exec.Command(py, sp, "--serve")
	s := &server{cmd: cmd, stderr: &tail{max: 64 << 10}}
	cmd.Stderr = s.stderr
	if s.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	s.stdout = bufio.NewReaderSize(out, 1<<16)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrMissing, py, err)
	}
	line, err := s.stdout.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "arrowcheck: ready") {
		return nil, s.died(fmt.Sprintf("no ready line (%q, %v)", line, err))
	}
	return s, nil
}

func (s *server) ask(req []byte) (reply, error) {
	var r reply
	if _, err := s.stdin.Write(append(req, '\n')); err != nil {
		return r, s.died(err.Error())
	}
	line, err := s.stdout.ReadBytes('\n')
	if err != nil {
		return r, s.died(err.Error())
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return r, s.died(fmt.Sprintf("reply %.200q: %v", line, err))
	}
	return r, nil
}

// died ends the process and says why it stopped answering.
func (s *server) died(why string) error {
	s.stdin.Close()
	_ = s.cmd.Process.Kill()
	err := s.cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 3 {
		return fmt.Errorf("%w: %s", ErrMissing, strings.TrimSpace(s.stderr.String()))
	}
	return fmt.Errorf("arrowcheck: %s: %s (%v); stderr:\n%s", strings.Join(s.cmd.Args, " "), why, err, s.stderr.String())
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > w.max {
		w.b = w.b[len(w.b)-w.max:]
	}
	return len(p), nil
}

func (w *tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// CheckDir reads every shard of every directory with ferry's Go reader and
// with pyarrow and fails t on any difference. See the package documentation for what is compared.
func CheckDir(t testing.TB, dirs ...string) {
	t.Helper()
	var expect []Shard
	for _, d := range dirs {
		expect = append(expect, Expect(t, d)...)
	}
	report, err := Check(t, dirs, expect)
	switch {
	case errors.Is(err, ErrMissing):
		if os.Getenv("FERRY_REQUIRE_TOOLS") == "1" {
			t.Fatalf("%v (scripts/setup-test-deps builds the venv; FERRY_REQUIRE_TOOLS=1)", err)
		}
		t.Logf("%v; shards not checked with pyarrow (FERRY_REQUIRE_TOOLS=1 makes this a failure)", err)
	case err != nil:
		t.Error(err)
	default:
		t.Log(report)
	}
}
