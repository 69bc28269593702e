package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ferryml/ferry/serve"
	"github.com/ferryml/ferry/shard"
)

// TestMain lets the tests run this test binary as the daemon itself.
func TestMain(m *testing.M) {
	if os.Getenv("FERRY_SERVE_TEST_MAIN") == "1" {
		os.Exit(mainErr(os.Args[1:], os.Stderr))
	}
	os.Exit(m.Run())
}

func TestParseRanks(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"3", []int{3}, false},
		{"0-3,8", []int{0, 1, 2, 3, 8}, false},
		{" 1 , 2-2", []int{1, 2}, false},
		{"3-1", nil, true},
		{"-1", nil, true},
		{"a", nil, true},
		{"1,,2", nil, true},
	}
	for _, tt := range tests {
		got, err := parseRanks(tt.in)
		if (err != nil) != tt.wantErr || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("parseRanks(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestUsage(t *testing.T) {
	var buf bytes.Buffer
	if code := mainErr([]string{"--help"}, &buf); code != 0 || !strings.Contains(buf.String(), "usage: ferry-serve") {
		t.Errorf("--help: exit %d\n%s", code, buf.String())
	}
	// without --data the daemon serves model files only: not a usage error
	if cfg, err := parseFlags([]string{"--socket", "s"}, &buf); err != nil || cfg.Data != "" {
		t.Errorf("no --data: %+v, %v", cfg, err)
	}
	for _, args := range [][]string{{"--data", "x", "extra"}, {"--data", "x", "--ranks", "z"}, {"--bogus"}, {"--file-keep", "x"}} {
		buf.Reset()
		if code := mainErr(args, &buf); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, code, buf.String())
		}
	}
	buf.Reset()
	want := "manifest.json"
	if runtime.GOOS != "linux" {
		want = "ferry-serve needs Linux: memfd/eventfd"
	}
	if code := mainErr([]string{"--data", t.TempDir(), "--socket", filepath.Join(t.TempDir(), "s")}, &buf); code != 1 || !strings.Contains(buf.String(), want) {
		t.Errorf("empty data dir: exit %d\n%s", code, buf.String())
	}
}

func writeDataset(t *testing.T) string {
	t.Helper()
	exs := make([]shard.Example, 40)
	for i := range exs {
		exs[i] = shard.Example{Sample: int64(i), Tokens: []int32{int32(i + 1), 7, 8}}
	}
	lay := shard.Layout{SeqLen: 8, Mode: shard.ModePad, Labels: shard.LabelsMaskPad}
	src, err := shard.NewExampleSource(lay, exs)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ds")
	if _, err := shard.WriteDir(context.Background(), dir, shard.DirConfig{Layout: shard.Layout{SeqLen: 8, Mode: shard.ModePad, Labels: shard.LabelsMaskPad},
		Ranks: 2, Template: "t", Tokenizer: shard.TokenizerInfo{SHA256: "t"}}, src); err != nil {
		t.Fatal(err)
	}
	return dir
}

type daemon struct {
	cmd    *exec.Cmd
	sock   string
	stderr bytes.Buffer
}

func startDaemon(t *testing.T, data string) *daemon {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("ferry-serve needs Linux: memfd/eventfd")
	}
	d := &daemon{sock: filepath.Join(t.TempDir(), "serve.sock")}
	d.cmd = exec.Command(os.Args[0], "--data", data, "--socket", d.sock)
	d.cmd.Env = append(os.Environ(), "FERRY_SERVE_TEST_MAIN=1")
	d.cmd.Stderr = &d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.cmd.Process.Kill(); d.cmd.Wait() })
	waitListening(t, d)
	return d
}

// waitListening waits until a client can connect to d.
func waitListening(t *testing.T, d *daemon) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := serve.Dial(ctx, d.sock, serve.Hello{Slots: 1, MaxRows: 1})
		cancel()
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon not answering within 30 s: %v\n%s", err, d.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func connect(t *testing.T, sock string) *serve.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := serve.Dial(ctx, sock, serve.Hello{Slots: 2, MaxRows: 2, Rank: 0, Worker: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Plan([]serve.Run{{File: 0, Row: 1, Rows: 1, Flags: serve.RunContinues}, {File: 1, Row: 2, Rows: 1}}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	return c
}

func ringMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "memfd:ferry-serve")
}

func TestSIGTERMExitsCleanly(t *testing.T) {
	d := startDaemon(t, writeDataset(t))
	c := connect(t, d.sock)
	defer c.Close()
	d.cmd.Process.Signal(syscall.SIGTERM)
	if err := d.cmd.Wait(); err != nil {
		t.Fatalf("daemon exit after SIGTERM: %v\n%s", err, d.stderr.String())
	}
	if _, _, err := c.Wait(); !errors.Is(err, serve.ErrRemote) || !strings.Contains(err.Error(), "shutting down") {
		t.Fatalf("client got %v after SIGTERM", err)
	}
	if _, err := os.Lstat(d.sock); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind after SIGTERM: %v", err)
	}
	if !strings.Contains(d.stderr.String(), "stopped") {
		t.Errorf("no summary line:\n%s", d.stderr.String())
	}
}

func TestSIGKILLedDaemon(t *testing.T) {
	data := writeDataset(t)
	d := startDaemon(t, data)
	before := ringMaps(t)
	c := connect(t, d.sock)
	slot := c.Slot(0)
	if err := c.Plan([]serve.Run{{File: 0, Row: 3, Rows: 2}}); err != nil {
		t.Fatal(err)
	}
	c.Wait()
	d.cmd.Process.Kill()
	d.cmd.Wait()
	// The client learns it from the socket, not from a timeout.
	if err := c.Plan([]serve.Run{{File: 0, Row: 3, Rows: 1}}); err != nil && !errors.Is(err, serve.ErrDaemonGone) {
		t.Fatalf("Plan after the daemon died: %v", err)
	}
	if _, _, err := c.Wait(); !errors.Is(err, serve.ErrDaemonGone) {
		t.Fatalf("Wait after the daemon died: %v, want ErrDaemonGone", err)
	}
	if serve.ReadSlotHeader(slot).State != serve.SlotFilled { // the mapping is still ours
		t.Fatal("slot header lost")
	}
	c.Close()
	if n := ringMaps(t); n != before {
		t.Fatalf("%d ring mappings left after Close", n-before)
	}
	// The next daemon replaces the stale socket file.
	if _, err := os.Lstat(d.sock); err != nil {
		t.Fatalf("expected the killed daemon's socket file: %v", err)
	}
	d2 := &daemon{sock: d.sock}
	d2.cmd = exec.Command(os.Args[0], "--data", data, "--socket", d.sock)
	d2.cmd.Env = append(os.Environ(), "FERRY_SERVE_TEST_MAIN=1")
	d2.cmd.Stderr = &d2.stderr
	if err := d2.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { d2.cmd.Process.Kill(); d2.cmd.Wait() }()
	waitListening(t, d2)
}
