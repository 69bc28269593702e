//go:build linux

// Command appendfsd serves the test file system of smallfs.AppendFUSE: an
// in-memory FUSE file system that behaves like the FUSE volumes of object
// stores (Databricks /Volumes, gcsfuse, mountpoint-s3). With -strict a
// file takes writes only at its current end and can be truncated only to
// zero or to its size; any other write fails with EOPNOTSUPP ("operation
// not supported", what those volumes answer), and the count of refusals is
// kept in the -stats file. It has directories, create, unlink, rename
// (with RENAME_NOREPLACE), read, mmap through the page cache and fsync of
// files (a no-op); fsync of a directory is not implemented (EOPNOTSUPP).
//
// It runs as its own process, as a real FUSE daemon does: a process that
// maps a file of a FUSE file system it serves itself can deadlock (page
// faults hold the Go scheduler's Ps that the server needs).
//
//	appendfsd [-strict] [-stats FILE] MOUNTPOINT    # prints "ready" once mounted; unmounts on SIGTERM
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

type appendFS struct {
	strict  bool
	stats   string
	mu      sync.Mutex
	refused int64
}

// refuse counts a refused write and records the count in the stats file
// (written to a temporary name and renamed: a reader never sees half).
func (a *appendFS) refuse() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refused++
	if a.stats != "" {
		tmp := a.stats + ".tmp"
		if os.WriteFile(tmp, []byte(fmt.Sprint(a.refused)), 0o644) == nil {
			os.Rename(tmp, a.stats)
		}
	}
}

func main() {
	strict := flag.Bool("strict", false, "refuse writes that are not at the end of the file")
	stats := flag.String("stats", "", "keep the number of refused writes in this file")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: appendfsd [-strict] [-stats FILE] MOUNTPOINT")
		os.Exit(2)
	}
	a := &appendFS{strict: *strict, stats: *stats}
	srv, err := fs.Mount(flag.Arg(0), &fuseDir{fsys: a}, &fs.Options{MountOptions: fuse.MountOptions{
		FsName:      "appendfs",
		Name:        "appendfs",
		DirectMount: true,
		MaxWrite:    1 << 20,
	}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "appendfsd: mount %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sig
		if err := srv.Unmount(); err != nil {
			unix.Unmount(flag.Arg(0), unix.MNT_DETACH)
		}
	}()
	fmt.Println("ready")
	srv.Wait()
}

type fuseDir struct {
	fs.Inode
	fsys *appendFS
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
	fsys *appendFS
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
		f.fsys.refuse()
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
			f.fsys.refuse()
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
