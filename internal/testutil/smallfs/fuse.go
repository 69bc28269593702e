//go:build linux

package smallfs

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FUSE is a mounted in-memory FUSE file system that behaves like the FUSE
// volumes of object stores (Databricks /Volumes, gcsfuse, mountpoint-s3):
// when Strict, a file takes writes only at its current end and can be
// truncated only to zero or to its size; any other write fails with
// EOPNOTSUPP ("operation not supported", what those volumes answer). It
// has directories, create, unlink, rename (with RENAME_NOREPLACE), read,
// mmap through the page cache, and fsync (a no-op).
type FUSE struct {
	// Dir is the mount point.
	Dir     string
	strict  bool
	refused atomic.Int64
}

// Refused returns the number of writes and truncations refused so far.
func (f *FUSE) Refused() int64 { return f.refused.Load() }

// AppendFUSE mounts a FUSE file system (fuse.appendfs) on a fresh
// directory, unmounted when the test ends; strict makes it refuse every
// write that is not at the end of the file. Mounting needs /dev/fuse and
// root (or CAP_SYS_ADMIN); without them the test is skipped, or fails when
// FERRY_REQUIRE_TOOLS=1.
func AppendFUSE(t testing.TB, strict bool) *FUSE {
	t.Helper()
	f := &FUSE{Dir: t.TempDir(), strict: strict}
	root := &fuseDir{fsys: f}
	srv, err := fs.Mount(f.Dir, root, &fs.Options{MountOptions: fuse.MountOptions{
		FsName:      "appendfs",
		Name:        "appendfs",
		DirectMount: true,
		MaxWrite:    1 << 20,
	}})
	if err != nil {
		unavailable(t, fmt.Sprintf("cannot mount a FUSE file system (needs /dev/fuse and root or CAP_SYS_ADMIN): %v", err))
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			unix.Unmount(f.Dir, unix.MNT_DETACH)
		}
	})
	return f
}

type fuseDir struct {
	fs.Inode
	fsys *FUSE
}

var (
	_ fs.NodeCreater  = (*fuseDir)(nil)
	_ fs.NodeMkdirer  = (*fuseDir)(nil)
	_ fs.NodeUnlinker = (*fuseDir)(nil)
	_ fs.NodeRmdirer  = (*fuseDir)(nil)
	_ fs.NodeRenamer  = (*fuseDir)(nil)
)

func (d *fuseDir) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if d.GetChild(name) != nil {
		if flags&syscall.O_EXCL != 0 {
			return nil, nil, 0, syscall.EEXIST
		}
	}
	f := &fuseFile{fsys: d.fsys, mode: mode & 0o7777}
	ch := d.NewInode(ctx, f, fs.StableAttr{Mode: syscall.S_IFREG})
	f.fill(&out.Attr)
	return ch, nil, 0, fs.OK
}

func (d *fuseDir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if d.GetChild(name) != nil {
		return nil, syscall.EEXIST
	}
	out.Attr.Mode = syscall.S_IFDIR | 0o755
	return d.NewInode(ctx, &fuseDir{fsys: d.fsys}, fs.StableAttr{Mode: syscall.S_IFDIR}), fs.OK
}

func (d *fuseDir) Unlink(ctx context.Context, name string) syscall.Errno { return fs.OK }

func (d *fuseDir) Rmdir(ctx context.Context, name string) syscall.Errno {
	if ch := d.GetChild(name); ch != nil && len(ch.Children()) > 0 {
		return syscall.ENOTEMPTY
	}
	return fs.OK
}

func (d *fuseDir) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags&unix.RENAME_EXCHANGE != 0 {
		return syscall.EINVAL
	}
	if flags&unix.RENAME_NOREPLACE != 0 && newParent.EmbeddedInode().GetChild(newName) != nil {
		return syscall.EEXIST
	}
	return fs.OK // the bridge moves the child, replacing newName
}

type fuseFile struct {
	fs.Inode
	fsys *FUSE
	mu   sync.Mutex
	data []byte
	mode uint32
}

var (
	_ fs.NodeOpener    = (*fuseFile)(nil)
	_ fs.NodeReader    = (*fuseFile)(nil)
	_ fs.NodeWriter    = (*fuseFile)(nil)
	_ fs.NodeGetattrer = (*fuseFile)(nil)
	_ fs.NodeSetattrer = (*fuseFile)(nil)
	_ fs.NodeFsyncer   = (*fuseFile)(nil)
	_ fs.NodeFlusher   = (*fuseFile)(nil)
)

func (f *fuseFile) fill(a *fuse.Attr) {
	a.Mode = syscall.S_IFREG | f.mode
	a.Size = uint64(len(f.data))
}

func (f *fuseFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, 0, fs.OK
}

func (f *fuseFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	off = min(off, int64(len(f.data)))
	end := min(off+int64(len(dest)), int64(len(f.data)))
	return fuse.ReadResultData(append([]byte(nil), f.data[off:end]...)), fs.OK
}

func (f *fuseFile) Write(ctx context.Context, fh fs.FileHandle, p []byte, off int64) (uint32, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fsys.strict && off != int64(len(f.data)) {
		f.fsys.refused.Add(1)
		return 0, syscall.EOPNOTSUPP
	}
	if end := off + int64(len(p)); end > int64(len(f.data)) {
		f.data = append(f.data, make([]byte, end-int64(len(f.data)))...)
	}
	copy(f.data[off:], p)
	return uint32(len(p)), fs.OK
}

func (f *fuseFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fill(&out.Attr)
	return fs.OK
}

func (f *fuseFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if sz, ok := in.GetSize(); ok && sz != uint64(len(f.data)) {
		if f.fsys.strict && sz != 0 {
			f.fsys.refused.Add(1)
			return syscall.EOPNOTSUPP
		}
		if sz < uint64(len(f.data)) {
			f.data = f.data[:sz]
		} else {
			f.data = append(f.data, make([]byte, sz-uint64(len(f.data)))...)
		}
	}
	if m, ok := in.GetMode(); ok {
		f.mode = m & 0o7777
	}
	f.fill(&out.Attr)
	return fs.OK
}

func (f *fuseFile) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) syscall.Errno {
	return fs.OK
}
func (f *fuseFile) Flush(ctx context.Context, fh fs.FileHandle) syscall.Errno { return fs.OK }
