package storage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/ferryml/ferry/internal/invariants"
)

// AtomicFile is a local file written under a hidden temporary name in the
// directory of its target and moved into place by Commit. It is the one
// atomic local write of ferry: the local Writer of Create, the shard
// writer and the checkpoint merger's local outputs all use it.
//
//	create  /d/.name<marker><12 hex>   O_RDWR|O_CREAT|O_EXCL (marker: WithTempMarker)
//	write   through File: in order or positioned, any number of descriptors
//	commit  fsync(tmp), close, rename(tmp, name) -- renameat2 NOREPLACE
//	        unless WithOverwrite(true) -- then fsync(/d)
//	abort   close, unlink tmp
//
// Until Commit returns nil nothing is visible under the target name and an
// existing file there is untouched (without WithOverwrite, Commit fails
// with an error wrapping fs.ErrExist when the target appeared meanwhile).
// A failed Commit removes the temporary file, except when only the final
// fsync of the directory failed: the file is then in place and the error
// says so. The fsyncs follow SyncFile and SyncDir: a file system without
// fsync (EINVAL, ENOTSUP, ENOSYS) is not an error.
//
// The bytes are written through File by the caller; an AtomicFile is not
// safe for concurrent use, except that Abort may run concurrently with
// Commit (a deferred Abort on another goroutine): exactly one of them wins.
type AtomicFile struct {
	f         *os.File
	path, tmp string
	overwrite bool

	mu        sync.Mutex           // guards the ending and committed
	end       invariants.CloseOnce // committed or aborted: closed once, under mu
	committed bool
}

// CreateAtomic starts an AtomicFile for the local path. The parent
// directory must exist. Without WithOverwrite(true) an existing target is
// an error wrapping fs.ErrExist; a directory at the target is always an
// error. Options other than WithOverwrite, WithPerm and WithTempMarker are
// ignored.
func CreateAtomic(path string, opts ...Option) (*AtomicFile, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return createAtomic(path, cfg)
}

func createAtomic(path string, cfg *config) (*AtomicFile, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: empty path", ErrBadLocation)
	}
	dir, base := filepath.Split(filepath.Clean(path))
	if dir == "" {
		dir = "."
	}
	st, err := os.Stat(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, pathError("create", path, fmt.Errorf("parent directory %s does not exist: %w", dir, fs.ErrNotExist))
		}
		return nil, fmt.Errorf("storage: create %s: %w", path, err)
	}
	if !st.IsDir() {
		return nil, pathError("create", path, fmt.Errorf("parent %s is not a directory", dir))
	}
	if tst, err := os.Lstat(path); err == nil {
		if tst.IsDir() {
			return nil, pathError("create", path, errors.New("target is a directory"))
		}
		if !cfg.overwrite {
			return nil, pathError("create", path, fs.ErrExist)
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := filepath.Join(dir, "."+base+cfg.tempMarker+hex.EncodeToString(rnd[:]))
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, cfg.perm)
	if err != nil {
		return nil, fmt.Errorf("storage: create %s: %w", path, unwrapPathErr(err))
	}
	a := &AtomicFile{f: f, path: path, tmp: tmp, overwrite: cfg.overwrite}
	// With the self-checks on, an AtomicFile dropped without Commit or
	// Abort (its temporary file left behind) is a bug.
	invariants.SetFinalizer(a, func(a *AtomicFile) {
		if !a.end.Closed() {
			panic("invariants: storage.AtomicFile " + a.path + " neither committed nor aborted")
		}
	})
	return a, nil
}

// File is the temporary file, open for reading and writing. Do not close it.
func (a *AtomicFile) File() *os.File {
	a.end.Use("storage.AtomicFile.File")
	return a.f
}

// Name is the target path.
func (a *AtomicFile) Name() string { return a.path }

// TempName is the path of the temporary file, for opening more descriptors
// on it (O_DIRECT, copy_file_range, a read-back check) before Commit.
func (a *AtomicFile) TempName() string { return a.tmp }

// Commit makes the file visible under its target name: fsync of the file,
// close, rename (no-replace unless WithOverwrite(true)), fsync of the
// directory. ctx is checked after the fsync, before the rename. Commit
// after Abort gives an error wrapping ErrAborted; a second Commit after a
// successful one returns nil.
func (a *AtomicFile) Commit(ctx context.Context) error {
	a.mu.Lock()
	done, committed := a.end.Closed(), a.committed
	a.mu.Unlock()
	if done {
		if committed {
			return nil
		}
		return pathError("commit", a.path, ErrAborted)
	}
	if err := SyncFile(a.f); err != nil {
		a.Abort()
		return fmt.Errorf("storage: fsync %s: %w", a.path, unwrapPathErr(err))
	}
	if err := ctx.Err(); err != nil {
		a.Abort()
		return pathError("commit", a.path, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.end.Close() {
		return pathError("commit", a.path, ErrAborted)
	}
	if err := a.f.Close(); err != nil {
		os.Remove(a.tmp)
		return fmt.Errorf("storage: close %s: %w", a.path, unwrapPathErr(err))
	}
	var err error
	if a.overwrite {
		err = os.Rename(a.tmp, a.path)
	} else {
		err = renameNoReplace(a.tmp, a.path)
	}
	if err != nil {
		os.Remove(a.tmp)
		if errors.Is(err, fs.ErrExist) {
			return pathError("commit", a.path, fs.ErrExist)
		}
		return fmt.Errorf("storage: commit %s: %w", a.path, unwrapPathErr(err))
	}
	a.committed = true
	if err := SyncDir(filepath.Dir(a.path)); err != nil {
		return fmt.Errorf("storage: commit %s: fsync directory: %w", a.path, err)
	}
	return nil
}

// Abort discards the temporary file. It is a no-op after Commit or Abort.
func (a *AtomicFile) Abort() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.end.Close() {
		return nil
	}
	a.f.Close()
	if err := os.Remove(a.tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("storage: abort %s: %w", a.path, unwrapPathErr(err))
	}
	return nil
}

// unwrapPathErr drops the *fs.PathError naming the temporary file: the
// user knows the target name, not ours.
func unwrapPathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ignorableSyncErr reports whether fsync failed only because the file
// system does not implement it (some FUSE and network file systems).
func ignorableSyncErr(err error) bool {
	return errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) || errors.Is(err, syscall.ENOSYS)
}

// SyncFile fsyncs f. A file system that does not implement fsync (some
// FUSE and network file systems answer EINVAL, ENOTSUP or ENOSYS) is not
// an error: there is nothing more to do for durability there.
func SyncFile(f *os.File) error {
	if err := f.Sync(); err != nil && !ignorableSyncErr(err) {
		return err
	}
	return nil
}

// SyncDir fsyncs the directory dir, after a rename into it, with the
// tolerance of SyncFile (FUSE mounts often refuse fsync of a directory).
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !ignorableSyncErr(err) && !errors.Is(err, syscall.EBADF) {
		return err
	}
	return nil
}
