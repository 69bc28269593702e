package serve

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ferryml/ferry/internal/shm"
	"golang.org/x/sys/unix"
)

// TestModelFiles: a daemon without a data set answers MsgFile requests:
// ranged reads, whole files read once for several clients, a missing file,
// a request for a path outside the directory.
func TestModelFiles(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("memfd is Linux's")
	}
	dir := t.TempDir()
	body := []byte(strings.Repeat("0123456789abcdef", 5000))
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors"), body, 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var logs []string
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := NewServer(ctx, Config{Logf: func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, f)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Dataset() != nil {
		t.Fatal("Dataset() of a daemon without Data is not nil")
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()

	ask := func(c *net.UnixConn, req FileRequest) (FileData, []byte, MsgHeader, []byte) {
		t.Helper()
		p, _ := json.Marshal(req)
		if _, err := c.Write(appendMsg(nil, MsgFile, p)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, MaxMsgSize+1)
		n, fds, err := shm.RecvFds(c, buf, 1)
		if err != nil {
			t.Fatal(err)
		}
		h, q, err := ParseMsg(buf[:n])
		if err != nil {
			t.Fatal(err)
		}
		var fd FileData
		var data []byte
		if h.Type == MsgFileData {
			if err := json.Unmarshal(q, &fd); err != nil {
				t.Fatal(err)
			}
		}
		for _, f := range fds {
			if fd.Size > 0 {
				m, err := unix.Mmap(int(f.Fd()), 0, int(fd.Size), unix.PROT_READ, unix.MAP_SHARED)
				if err != nil {
					t.Fatal(err)
				}
				data = append([]byte(nil), m...)
				unix.Munmap(m)
			}
			f.Close()
		}
		return fd, data, h, q
	}
	dial := func() *net.UnixConn {
		c, err := net.Dial("unixpacket", sock)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}

	c := dial()
	fd, data, _, _ := ask(c, FileRequest{Path: dir, File: "model.safetensors", Offset: 100, Length: 50})
	if fd.FileSize != int64(len(body)) || string(data) != string(body[100:150]) {
		t.Errorf("ranged read: %+v %q", fd, data)
	}
	fd, _, _, _ = ask(c, FileRequest{Path: dir, File: "nope.safetensors", Length: 0})
	if !fd.Missing {
		t.Errorf("missing file: %+v", fd)
	}
	for i := 0; i < 3; i++ {
		c2 := dial()
		fd, data, _, _ = ask(c2, FileRequest{Path: dir, File: "model.safetensors", Length: -1})
		if string(data) != string(body) || fd.Size != int64(len(body)) {
			t.Errorf("whole file %d: %+v, %d bytes", i, fd, len(data))
		}
		c2.Close()
	}
	mu.Lock()
	reads := 0
	for _, l := range logs {
		if strings.HasPrefix(l, "model file ") {
			reads++
		}
	}
	mu.Unlock()
	if reads != 1 {
		t.Errorf("the whole file was read %d times for 3 clients, want 1", reads)
	}
	_, _, h, q := ask(c, FileRequest{Path: dir, File: "../etc/passwd", Length: -1})
	if h.Type != MsgError {
		t.Fatalf("a path outside the directory: message type %d, want ERROR", h.Type)
	}
	if code, text, _ := ParseError(q); code != CodeBadRequest || !strings.Contains(text, "plain file name") {
		t.Errorf("a path outside the directory: code %d %q", code, text)
	}
	c.Close()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestReadChunks(t *testing.T) {
	for _, c := range []struct {
		offset, length int64
		want           [][2]int64
	}{
		{0, 0, nil},
		{0, 100, [][2]int64{{0, 100}}},
		{0, 8192, [][2]int64{{0, 8192}}},
		{0, 8200, [][2]int64{{0, 8192}, {8192, 8200}}},
		{4096, fileReadChunk + 10, [][2]int64{{0, fileReadChunk}, {fileReadChunk, fileReadChunk + 10}}},
		{0, 2*fileReadChunk + 5000, [][2]int64{{0, fileReadChunk}, {fileReadChunk, 2 * fileReadChunk}, {2 * fileReadChunk, 2*fileReadChunk + 4096}, {2*fileReadChunk + 4096, 2*fileReadChunk + 5000}}},
		{8, 8200, [][2]int64{{0, 8200}}}, // unaligned offset: no direct read, one chunk
	} {
		got := readChunks(c.offset, c.length)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("readChunks(%d, %d) = %v, want %v", c.offset, c.length, got, c.want)
		}
	}
}
