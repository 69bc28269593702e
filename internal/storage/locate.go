package storage

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// The location layer: every decision that depends on where a location
// lives (a local or mounted path, or s3://) is taken in this package. The
// rest of ferry asks these questions instead of testing the scheme:
//
//	LocalPath  can it be opened (mapped) as a file here?
//	Glob       the locations a pattern names
//	MakeDir    make sure a directory location can take objects
//	ListNames  the base names of the objects directly in a directory
//	WriteFile  one atomic put of a small object
//	Fetch      one verified, atomic remote-to-local copy
//	Stage      a local directory whose files are published at a location
//	RemoveMatching  clear what an earlier or killed run left in a directory

// ErrChecksum is returned by Fetch when the bytes it fetched do not have
// the size or SHA-256 the caller expected; nothing is left at the target.
var ErrChecksum = errors.New("storage: checksum mismatch")

// LocalPath returns the local file-system path of loc and true when loc is
// on a local or mounted file system (it can be opened and mapped as a
// file); for an object-store location it returns "" and false.
func LocalPath(loc string) (string, bool) {
	if IsS3(loc) {
		return "", false
	}
	return loc, true
}

// MakeDir creates the directory loc (and its parents) when loc is local;
// object-store prefixes need no creating.
func MakeDir(loc string) error {
	if p, ok := LocalPath(loc); ok {
		return os.MkdirAll(p, 0o755)
	}
	return nil
}

// ListNames returns the base names of the files or objects directly in the
// directory or prefix dir (not below it; no temporary files of AtomicFile
// or Create), sorted. A missing directory or an empty prefix gives none.
func ListNames(ctx context.Context, dir string, opts ...Option) ([]string, error) {
	prefix := dir
	if IsS3(dir) {
		prefix = strings.TrimSuffix(dir, "/") + "/"
	}
	infos, err := List(ctx, prefix, opts...)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, in := range infos {
		if IsS3(dir) {
			if b, ok := strings.CutPrefix(in.Loc, prefix); ok && b != "" && !strings.Contains(b, "/") {
				names = append(names, b)
			}
		} else if filepath.Dir(in.Loc) == filepath.Clean(dir) {
			names = append(names, filepath.Base(in.Loc))
		}
	}
	return names, nil
}

// WriteFile writes data as loc atomically (Create with WithOverwrite(true):
// temp file, fsync and rename, or one S3 object), replacing any previous
// object; on any error nothing changes at loc.
func WriteFile(ctx context.Context, loc string, data []byte, opts ...Option) error {
	w, err := Create(ctx, loc, append([]Option{WithOverwrite(true)}, opts...)...)
	if err != nil {
		return err
	}
	defer w.Abort()
	if _, err := w.Write(data); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	return w.Commit()
}

// Fetch copies src (any location) to the local path local, atomically and
// verified: the bytes are hashed while they stream in, and local appears
// (replacing any previous file) only when their SHA-256 is sum (hex, any
// case; "" checks nothing) and, when size >= 0, their size is size.
// A mismatch gives an error wrapping ErrChecksum and naming src.
func Fetch(ctx context.Context, src, local, sum string, size int64) error {
	rc, n, err := OpenStream(ctx, src)
	if err != nil {
		return fmt.Errorf("storage: fetch %s: %w", src, err)
	}
	defer rc.Close()
	if size >= 0 && n != size {
		return fmt.Errorf("%w: %s: %d bytes, want %d", ErrChecksum, src, n, size)
	}
	w, err := Create(ctx, local, WithOverwrite(true))
	if err != nil {
		return fmt.Errorf("storage: fetch %s: %w", src, err)
	}
	defer w.Abort()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(w, h), rc); err != nil {
		return fmt.Errorf("storage: fetch %s: %w", src, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); sum != "" && !strings.EqualFold(got, sum) {
		return fmt.Errorf("%w: %s: sha256 %s, want %s", ErrChecksum, src, got, sum)
	}
	return w.Commit()
}

// Stage is a local directory for files that are published at a location:
// the location itself when it is local (Publish does nothing), a temporary
// directory whose files Publish uploads when it is an object store.
type Stage struct {
	loc, dir string
	tmp      bool
}

// NewStage returns the stage of loc; a temporary directory is made under
// base (default os.TempDir()) when loc is not local, and a local loc is
// created when missing.
func NewStage(loc, base string) (*Stage, error) {
	if p, ok := LocalPath(loc); ok {
		if err := os.MkdirAll(p, 0o755); err != nil {
			return nil, err
		}
		return &Stage{loc: loc, dir: p}, nil
	}
	if base == "" {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "ferry-stage-")
	if err != nil {
		return nil, fmt.Errorf("storage: staging directory: %w", err)
	}
	return &Stage{loc: loc, dir: dir, tmp: true}, nil
}

// Dir is the local directory to write into.
func (s *Stage) Dir() string { return s.dir }

// Publish makes Dir()/name visible at loc/name (an upload that replaces
// any previous object, then the staged file is removed), or does nothing
// when the stage is loc itself.
func (s *Stage) Publish(ctx context.Context, name string) error {
	if !s.tmp {
		return nil
	}
	local := filepath.Join(s.dir, name)
	f, err := os.Open(local)
	if err != nil {
		return fmt.Errorf("storage: publish: %w", err)
	}
	defer f.Close()
	loc := Join(s.loc, name)
	w, err := Create(ctx, loc, WithOverwrite(true))
	if err != nil {
		return fmt.Errorf("storage: publish: %w", err)
	}
	defer w.Abort()
	if _, err := io.Copy(w, f); err != nil {
		return fmt.Errorf("storage: publish %s: %w", loc, err)
	}
	if err := w.Commit(); err != nil {
		return fmt.Errorf("storage: publish %s: %w", loc, err)
	}
	_ = os.Remove(local)
	return nil
}

// Close removes a temporary stage directory and what is left in it.
func (s *Stage) Close() error {
	if !s.tmp {
		return nil
	}
	return os.RemoveAll(s.dir)
}

// RemoveMatching removes the files or objects directly in the directory
// or prefix dir whose base name match accepts and, in a local directory,
// the temporary files that AtomicFile or Create left behind for such
// names (a killed writer's). A missing directory has nothing to remove.
func RemoveMatching(ctx context.Context, dir string, match func(name string) bool) error {
	remove := func(loc string) error {
		if err := Remove(ctx, loc); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	p, local := LocalPath(dir)
	if !local {
		names, err := ListNames(ctx, dir)
		if err != nil {
			return err
		}
		for _, name := range names {
			if match(name) {
				if err := remove(Join(dir, name)); err != nil {
					return err
				}
			}
		}
		return nil
	}
	ents, err := os.ReadDir(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() {
			continue
		}
		target := name
		if i := strings.Index(name, tempMarker); i > 0 && name[0] == '.' {
			target = name[1:i]
		}
		if match(target) {
			if err := remove(filepath.Join(p, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Glob returns the locations that match pattern (path.Match syntax: *, ?,
// [...], matched per path element), local files as filepath.Glob finds
// them or the objects under the pattern's fixed s3:// prefix, in no set
// order. A bad pattern gives an error wrapping path.ErrBadPattern (or
// filepath.ErrBadPattern).
func Glob(ctx context.Context, pattern string) ([]string, error) {
	if p, ok := LocalPath(pattern); ok {
		return filepath.Glob(p)
	}
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, err
	}
	i := strings.IndexAny(pattern, `*?[\`)
	if i < 0 {
		i = len(pattern)
	}
	prefix := pattern[:strings.LastIndex(pattern[:i], "/")+1]
	infos, err := List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, in := range infos {
		if ok, _ := path.Match(pattern, in.Loc); ok {
			out = append(out, in.Loc)
		}
	}
	return out, nil
}
