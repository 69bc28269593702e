package shm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestMemfdIsSealed(t *testing.T) {
	f, err := Memfd("shm-test", 8192)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seals, err := GetSeals(f)
	if err != nil || seals&Seals != Seals {
		t.Fatalf("seals %#x, %v", seals, err)
	}
	if err := f.Truncate(4096); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("shrinking a sealed memfd: %v, want EPERM", err)
	}
	if err := f.Truncate(1 << 20); !errors.Is(err, syscall.EPERM) {
		t.Fatalf("growing a sealed memfd: %v, want EPERM", err)
	}
	b, err := Map(f, 8192)
	if err != nil {
		t.Fatal(err)
	}
	b[8191] = 7
	if err := Unmap(b); err != nil {
		t.Fatal(err)
	}
	link, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if !strings.HasPrefix(link, "/memfd:shm-test") {
		t.Fatalf("memfd link %q", link)
	}
	if _, err := Memfd("zero", 0); err == nil {
		t.Fatal("zero-size memfd")
	}
}

func TestEventfdCounts(t *testing.T) {
	e, err := Eventfd()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	var b [8]byte
	for _, n := range []uint64{1, 2, 3} {
		binary.LittleEndian.PutUint64(b[:], n)
		if _, err := e.Write(b[:]); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Read(b[:]); err != nil || binary.LittleEndian.Uint64(b[:]) != 6 {
		t.Fatalf("read %d, %v; want the sum 6", binary.LittleEndian.Uint64(b[:]), err)
	}
	// Empty: a read blocks (in the poller) until the deadline.
	e.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := e.Read(b[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of an empty eventfd: %v", err)
	}
}

func TestPassFds(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "sock")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := conn(fds[0]), conn(fds[1])
	defer a.Close()
	defer b.Close()
	m, err := Memfd("pass", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, _ := Eventfd()
	defer e.Close()
	if err := SendFds(a, []byte("hello"), m, e); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, got, err := RecvFds(b, buf, 2)
	if err != nil || !bytes.Equal(buf[:n], []byte("hello")) || len(got) != 2 {
		t.Fatalf("%q %d fds %v", buf[:n], len(got), err)
	}
	for _, f := range got {
		defer f.Close()
	}
	if seals, err := GetSeals(got[0]); err != nil || seals&Seals != Seals {
		t.Fatalf("received memfd seals %#x %v", seals, err)
	}
	// More descriptors than accepted: all closed, error.
	SendFds(a, []byte("x"), m, e, m)
	if _, got, err := RecvFds(b, buf, 2); !errors.Is(err, ErrTruncated) || got != nil {
		t.Fatalf("3 fds into room for 2: %v", err)
	}
}
