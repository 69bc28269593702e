//go:build linux

package smallfs

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// FUSE is a mounted FUSE file system (fuse.appendfs, served by the
// appendfsd command in its own process) that behaves like the FUSE volumes
// of object stores: when strict, a file takes writes only at its current
// end; any other write fails with EOPNOTSUPP. See appendfsd for what it
// implements.
type FUSE struct {
	// Dir is the mount point.
	Dir   string
	stats string
}

// Refused returns the number of writes and truncations refused so far.
func (f *FUSE) Refused() int64 {
	b, err := os.ReadFile(f.stats)
	if err != nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(b), 10, 64)
	return n
}

// AppendFUSE builds appendfsd (go build, from the module's source) and
// mounts its file system on a fresh directory, unmounted when the test
// ends; strict makes it refuse every write that is not at the end of the
// file. It needs the go command, /dev/fuse and root (or CAP_SYS_ADMIN);
// without them the test is skipped, or fails when FERRY_REQUIRE_TOOLS=1.
func AppendFUSE(t testing.TB, strict bool) *FUSE {
	t.Helper()
	_, self, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("smallfs: no source path for appendfsd")
	}
	bin := filepath.Join(t.TempDir(), "appendfsd")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(filepath.Dir(self), "appendfsd")).CombinedOutput(); err != nil {
		unavailable(t, "cannot build appendfsd: "+err.Error()+"\n"+string(out))
	}
	f := &FUSE{Dir: t.TempDir(), stats: filepath.Join(t.TempDir(), "refused")}
	cmd := exec.Command(bin, "-strict="+strconv.FormatBool(strict), "-stats", f.stats, f.Dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- strings.TrimSpace(line)
	}()
	select {
	case line := <-ready:
		if line != "ready" {
			cmd.Wait()
			unavailable(t, "cannot mount a FUSE file system (needs /dev/fuse and root or CAP_SYS_ADMIN): "+stderr.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("appendfsd did not mount %s in 30s: %s", f.Dir, stderr.String())
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			unix.Unmount(f.Dir, unix.MNT_DETACH)
			cmd.Process.Kill()
			<-done
		}
	})
	return f
}
