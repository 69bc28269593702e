package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ferryml/ferry/ckpt"
	"github.com/ferryml/ferry/internal/shm"
	"golang.org/x/sync/errgroup"
)

// Model files (python: ferry.load_pretrained(..., serve=SOCKET)).
//
// A client whose first message is MsgFile (instead of MsgHello) asks for
// bytes of a model file: the JSON payload {"path": DIR, "file": NAME,
// "offset": N, "length": N}. DIR is the model directory (local, mounted or
// s3://), NAME a plain file name in it. length -1 asks for the whole file:
// the daemon reads it once into a sealed memfd kept in its cache (by DIR and
// NAME) while clients ask for it, so the ranks of a node read each byte of
// the model from storage once; a length >= 0 (headers, the index) is read
// for this client only. The answer is MsgFileData, the JSON payload
// {"size": N, "file_size": N} and the memfd as its one descriptor
// (SCM_RIGHTS), or {"missing": true} and no descriptor when the file does
// not exist. A connection may ask for any number of files, one at a time.
// Errors end the connection with MsgError (CodeBadRequest, CodeIO).
//
// A cached file is dropped FileKeep after the last request for it (clients
// copy their ranges and unmap at once), so the node holds about one file of
// the model at a time beside the ranks' own shards.

// FileRequest is the payload of MsgFile.
type FileRequest struct {
	Path   string `json:"path"`
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
}

// FileData is the payload of MsgFileData.
type FileData struct {
	Size     int64 `json:"size,omitempty"`
	FileSize int64 `json:"file_size,omitempty"`
	Missing  bool  `json:"missing,omitempty"`
}

// MaxFileBytes bounds one model file (and one ranged read).
const MaxFileBytes = 1 << 40

// fileReadChunk is the size of one read of a model file; reads run fileReaders at a
// time (large sequential reads on network file systems, parallel ranged
// GETs on S3).
const (
	fileReadChunk = 16 << 20
	fileReaders   = 8
)

type cachedFile struct {
	ready chan struct{} // closed when mfd or err is set
	mfd   *os.File
	size  int64
	err   error
	users int
	timer *time.Timer
}

type fileCache struct {
	mu    sync.Mutex
	files map[string]*cachedFile
	keep  time.Duration
	logf  func(string, ...any)
}

func (c *fileCache) key(path, file string) string { return path + "\x00" + file }

// get returns the cached memfd of a whole file, reading it first if no
// client has; release must follow.
func (c *fileCache) get(ctx context.Context, path, file string) (*cachedFile, error) {
	k := c.key(path, file)
	c.mu.Lock()
	cf := c.files[k]
	if cf == nil {
		cf = &cachedFile{ready: make(chan struct{})}
		c.files[k] = cf
		go func() {
			start := time.Now()
			cf.mfd, cf.size, cf.err = readFile(context.WithoutCancel(ctx), path, file, 0, -1)
			if cf.err == nil {
				c.logf("model file %s/%s: %d bytes read in %.2fs", path, file, cf.size, time.Since(start).Seconds())
			}
			close(cf.ready)
		}()
	}
	if cf.timer != nil {
		cf.timer.Stop()
		cf.timer = nil
	}
	cf.users++
	c.mu.Unlock()
	select {
	case <-cf.ready:
	case <-ctx.Done():
		c.release(k, cf)
		return nil, ctx.Err()
	}
	if cf.err != nil {
		c.release(k, cf)
		return nil, cf.err
	}
	return cf, nil
}

func (c *fileCache) release(k string, cf *cachedFile) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cf.users--
	if cf.users > 0 {
		return
	}
	drop := func() {
		if c.files[k] == cf {
			delete(c.files, k)
		}
		if cf.mfd != nil {
			cf.mfd.Close()
		}
	}
	if cf.err != nil || c.keep <= 0 {
		drop()
		return
	}
	cf.timer = time.AfterFunc(c.keep, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if cf.users == 0 && cf.timer != nil {
			cf.timer = nil
			drop()
		}
	})
}

func (c *fileCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, cf := range c.files {
		select {
		case <-cf.ready:
			if cf.timer != nil {
				cf.timer.Stop()
			}
			if cf.mfd != nil && cf.users == 0 {
				cf.mfd.Close()
			}
		default:
		}
		delete(c.files, k)
	}
}

// readFile reads length bytes (-1: to the end) at offset of path/file into
// a new sealed memfd. A missing file gives an error wrapping fs.ErrNotExist.
func readFile(ctx context.Context, path, file string, offset, length int64) (*os.File, int64, error) {
	f, err := ckpt.SourceFor(path).Open(ctx, file)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	size := f.Size()
	if length < 0 {
		length = size - offset
	}
	if offset < 0 || offset > size || length > size-offset || length > MaxFileBytes {
		return nil, size, fmt.Errorf("%s/%s: bytes [%d, +%d) are outside the file (%d bytes)", path, file, offset, length, size)
	}
	mfd, err := shm.Memfd("ferry-serve-model:"+file, max(length, 1))
	if err != nil {
		return nil, size, err
	}
	mem, err := shm.Map(mfd, int(max(length, 1)))
	if err != nil {
		mfd.Close()
		return nil, size, err
	}
	defer shm.Unmap(mem)
	// local files are read with O_DIRECT where the file system takes it:
	// the node then holds the bytes once (in the memfd), not also in the
	// page cache; the memfd's mapping is page-aligned, and the chunks are
	// cut so that all but the last few bytes are aligned reads
	r := ckpt.NewDirectReader(f)
	defer r.Close()
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(fileReaders)
	for _, c := range readChunks(offset, length) {
		at, end := c[0], c[1]
		g.Go(func() error {
			n, err := r.ReadAt(mem[at:end], offset+at)
			if err == io.EOF && int64(n) == end-at {
				err = nil
			}
			if err != nil {
				return fmt.Errorf("%s/%s: reading bytes [%d, %d): %w", path, file, offset+at, offset+end, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		mfd.Close()
		return nil, size, err
	}
	return mfd, size, nil
}

// readChunks cuts [0, length) of a read at offset into chunks of at most
// fileReadChunk bytes; when offset is aligned to directAlign the last
// chunk's unaligned end is a chunk of its own, so that every other chunk
// can be a direct read.
func readChunks(offset, length int64) [][2]int64 {
	var out [][2]int64
	for at := int64(0); at < length; at += fileReadChunk {
		end := min(at+fileReadChunk, length)
		if cut := end &^ (directAlign - 1); end == length && offset%directAlign == 0 && cut > at && cut < end {
			out = append(out, [2]int64{at, cut}, [2]int64{cut, end})
			continue
		}
		out = append(out, [2]int64{at, end})
	}
	return out
}

// directAlign is the alignment of direct reads (ckpt.DirectReader's).
const directAlign = 4096

// serveFiles answers MsgFile requests until the client disconnects; first
// is the payload of the first one.
func (ss *session) serveFiles(ctx context.Context, buf, first []byte) error {
	p := first
	for {
		var req FileRequest
		if err := json.Unmarshal(p, &req); err != nil {
			return ss.fail(CodeBadRequest, fmt.Errorf("%w: FILE request: %v", ErrProtocol, err))
		}
		if err := checkFileRequest(req); err != nil {
			return ss.fail(CodeBadRequest, err)
		}
		if err := ss.answerFile(ctx, req); err != nil {
			return err
		}
		n, err := ss.conn.Read(buf)
		if err != nil || n == 0 {
			return nil // the client is done
		}
		h, q, err := ParseMsg(buf[:n])
		if err == nil && h.Type != MsgFile {
			err = fmt.Errorf("%w: message type %d on a model-file connection, want FILE (%d)", ErrProtocol, h.Type, MsgFile)
		}
		if err != nil {
			return ss.fail(CodeBadRequest, err)
		}
		p = q
	}
}

func checkFileRequest(req FileRequest) error {
	if req.Path == "" || req.File == "" || strings.ContainsAny(req.File, "/\\\x00") || req.File == "." || req.File == ".." {
		return fmt.Errorf("%w: FILE request for %q in %q: want a plain file name in a model directory", ErrProtocol, req.File, req.Path)
	}
	if req.Offset < 0 || req.Length < -1 || req.Length > MaxFileBytes {
		return fmt.Errorf("%w: FILE request for %s: offset %d, length %d", ErrLimit, req.File, req.Offset, req.Length)
	}
	return nil
}

func (ss *session) answerFile(ctx context.Context, req FileRequest) error {
	s := ss.srv
	var (
		mfd  *os.File
		size int64
		fsz  int64
		err  error
	)
	if req.Length < 0 {
		var cf *cachedFile
		cf, err = s.files.get(ctx, req.Path, req.File)
		if err == nil {
			defer s.files.release(s.files.key(req.Path, req.File), cf)
			mfd, size, fsz = cf.mfd, cf.size, cf.size
		}
	} else {
		mfd, fsz, err = readFile(ctx, req.Path, req.File, req.Offset, req.Length)
		size = req.Length
		if mfd != nil {
			defer mfd.Close()
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		_, werr := ss.conn.Write(appendJSONMsg(MsgFileData, FileData{Missing: true}))
		return werr
	}
	if err != nil {
		return ss.fail(CodeIO, err)
	}
	if err := shm.SendFds(ss.conn, appendJSONMsg(MsgFileData, FileData{Size: size, FileSize: fsz}), mfd); err != nil {
		return fmt.Errorf("sending FILEDATA: %w", err)
	}
	s.cfg.Logf("client %d: %s/%s [%d, +%d)", ss.id, req.Path, req.File, req.Offset, size)
	return nil
}

func appendJSONMsg(typ uint16, v any) []byte {
	p, _ := json.Marshal(v)
	return appendMsg(nil, typ, p)
}
