// Package shm wraps the Linux system calls behind ferry's shared-memory feed:
// anonymous sealed memory files (memfd_create + F_ADD_SEALS), eventfd
// counters, shared read-write mappings of a memfd, and passing file
// descriptors over a Unix socket with SCM_RIGHTS. (Files are mapped
// read-only by internal/mmap.)
//
// Memfd, GetSeals and Eventfd exist on Linux only (shm_linux.go); elsewhere
// they return an error wrapping ErrUnsupported (shm_other.go), so that code
// using the package builds on every Unix and refuses at run time.
//
// Nothing here creates a name in a file system: a memfd lives exactly as long
// as some process holds a descriptor or a mapping of it, so a crash of either
// side can never leave a segment behind in /dev/shm.
//
// All functions are safe for concurrent use. Mappings returned by Map are
// valid until Unmap; the caller owns every descriptor it receives.
package shm

import (
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// Map maps size bytes of f shared and read-write.
func Map(f *os.File, size int) ([]byte, error) {
	b, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: mmap %s (%d bytes): %w", f.Name(), size, err)
	}
	return b, nil
}

// Unmap releases a mapping made by Map.
func Unmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.Munmap(b)
}

// SendFds sends one message carrying msg and the descriptors fds
// (SCM_RIGHTS) on c.
func SendFds(c *net.UnixConn, msg []byte, fds ...*os.File) error {
	ints := make([]int, len(fds))
	for i, f := range fds {
		ints[i] = int(f.Fd())
	}
	oob := unix.UnixRights(ints...)
	n, oobn, err := c.WriteMsgUnix(msg, oob, nil)
	if err != nil {
		return err
	}
	if n != len(msg) || oobn != len(oob) {
		return fmt.Errorf("shm: short write of message with descriptors (%d/%d bytes, %d/%d control)", n, len(msg), oobn, len(oob))
	}
	return nil
}

// ErrUnsupported is wrapped by Memfd, GetSeals and Eventfd on systems
// other than Linux.
var ErrUnsupported = fmt.Errorf("shm: memfd/eventfd need Linux: %w", errors.ErrUnsupported)

// ErrTruncated reports a message or its control data cut short by the kernel
// because the receive buffer was too small.
var ErrTruncated = errors.New("shm: message truncated")

// RecvFds receives one message into buf and returns its length and any
// descriptors passed with it (at most maxFds are accepted; extra ones are
// closed and reported as an error).
func RecvFds(c *net.UnixConn, buf []byte, maxFds int) (int, []*os.File, error) {
	oob := make([]byte, unix.CmsgSpace(4*max(maxFds, 1)))
	n, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return n, nil, err
	}
	var files []*os.File
	if oobn > 0 {
		msgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr != nil {
			return n, nil, fmt.Errorf("shm: control message: %w", perr)
		}
		for _, m := range msgs {
			fds, ferr := unix.ParseUnixRights(&m)
			if ferr != nil {
				continue
			}
			for _, fd := range fds {
				files = append(files, os.NewFile(uintptr(fd), "passed-fd"))
			}
		}
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 || len(files) > maxFds {
		for _, f := range files {
			f.Close()
		}
		return n, nil, ErrTruncated
	}
	return n, files, nil
}
