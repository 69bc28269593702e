package storage

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/testutil/smallfs"
)

func TestLocalDiskFull(t *testing.T) {
	dir := smallfs.Tmpfs(t, "1m")
	ctx := context.Background()
	target := filepath.Join(dir, "target")
	old := randBytes(100<<10, 11)
	if err := writeAll(ctx, target, old, 1<<20); err != nil {
		t.Fatal(err)
	}
	var before unix.Statfs_t
	unix.Statfs(dir, &before)

	for _, chunk := range []int{64 << 10, 4 << 20} {
		err := writeAll(ctx, target, randBytes(2<<20, 12), chunk, WithOverwrite(true))
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("chunk %d: err = %v, want ENOSPC", chunk, err)
		}
		t.Logf("error: %v", err)
		got, rerr := os.ReadFile(target)
		if rerr != nil || !bytes.Equal(got, old) {
			t.Fatalf("previous object changed (%d bytes, %v)", len(got), rerr)
		}
		if names := dirEntries(t, dir); len(names) != 1 {
			t.Fatalf("directory holds %q, want only target", names)
		}
		var after unix.Statfs_t
		unix.Statfs(dir, &after)
		if after.Bfree != before.Bfree {
			t.Fatalf("free blocks %d after the failed write, %d before: space leaked", after.Bfree, before.Bfree)
		}
	}
	// A new file in the full file system leaves nothing either.
	err := writeAll(ctx, filepath.Join(dir, "new"), randBytes(2<<20, 13), 1<<20)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("new file: err = %v, want ENOSPC", err)
	}
	if names := dirEntries(t, dir); len(names) != 1 {
		t.Fatalf("directory holds %q, want only target", names)
	}
}

// TestSignalAbortsWrite runs a child process that writes through
// SignalContext and sends it SIGINT mid-write: the child must exit with
// status 130 and leave nothing at the target.
func TestSignalAbortsWrite(t *testing.T) {
	if target := os.Getenv("FERRY_STORAGE_SIGNAL_CHILD"); target != "" {
		signalChild(target)
		return
	}
	dir := t.TempDir()
	target := filepath.Join(dir, "out.bin")
	cmd := exec.Command(os.Args[0], "-test.run=^TestSignalAbortsWrite$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FERRY_STORAGE_SIGNAL_CHILD="+target)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "writing\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q; stderr:\n%s", line, stderr.String())
	}
	cmd.Process.Signal(os.Interrupt)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("child exit: %v, want status 130; stderr:\n%s", err, stderr.String())
	}
	if names := dirEntries(t, dir); len(names) != 0 {
		t.Fatalf("left behind after SIGINT: %q", names)
	}
}

func signalChild(target string) {
	ctx, stop := cli.SignalContext(context.Background())
	defer stop()
	w, err := Create(ctx, target)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer w.Abort()
	buf := make([]byte, 64<<10)
	said := false
	for range 60000 { // 64 KiB per millisecond, for at most a minute
		if _, err := w.Write(buf); err != nil {
			w.Abort()
			if cli.Interrupted(ctx) {
				os.Exit(130)
			}
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if !said {
			fmt.Println("writing")
			said = true
		}
		time.Sleep(time.Millisecond)
	}
	fmt.Fprintln(os.Stderr, "no signal arrived")
	os.Exit(1)
}
