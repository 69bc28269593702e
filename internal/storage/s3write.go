package storage

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
)

// abortTimeout bounds the AbortMultipartUpload sent after a failure or a
// cancellation (the writer's own context may already be done).
const abortTimeout = 30 * time.Second

// s3Writer uploads parts of a multipart upload in parallel while the caller
// keeps writing. Buffers: one being filled plus at most parallelism being
// uploaded; they are reused. An object that fits in one part is sent with
// a single PutObject on Commit and never starts a multipart upload.
type s3Writer struct {
	ctx    context.Context // caller's
	uctx   context.Context // uploads'; cancelled on abort or on the first failure
	cancel context.CancelFunc
	cl     *s3Client
	cfg    *config
	loc    string
	bucket string
	key    string

	buf      []byte      // being filled; len = bytes in it, cap = part size
	free     chan []byte // uploaded buffers ready for reuse; never blocks a sender
	bufsMade int         // buffers allocated so far (<= parallelism+1)

	g        *errgroup.Group
	uploadID string
	partNum  int
	partsMu  sync.Mutex
	parts    []minio.CompletePart
	n        int64

	inFlight, maxInFlight atomic.Int32 // uploads running now, and the most at once

	err  error // sticky; the writer is aborted when it is set
	done bool
	ok   bool // committed
}

func createS3(ctx context.Context, loc string, cfg *config) (Writer, error) {
	bucket, key, err := parseS3(loc, true)
	if err != nil {
		return nil, err
	}
	cl, err := clientFor(cfg)
	if err != nil {
		return nil, err
	}
	// Fail early on a missing bucket, bad credentials or an existing
	// target (Commit checks the target again).
	if err := checkTarget(ctx, cl, cfg, loc, bucket, key); err != nil {
		return nil, err
	}
	uctx, cancel := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(uctx)
	g.SetLimit(cfg.parallelism)
	return &s3Writer{
		ctx: ctx, uctx: gctx, cancel: cancel, cl: cl, cfg: cfg, loc: loc, bucket: bucket, key: key, g: g,
		free: make(chan []byte, cfg.parallelism+1),
	}, nil
}

func checkTarget(ctx context.Context, cl *s3Client, cfg *config, loc, bucket, key string) error {
	_, err := cl.core.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err == nil {
		if cfg.overwrite {
			return nil
		}
		return fmt.Errorf("storage: create %s: %w", loc, fs.ErrExist)
	}
	serr := cl.headError(ctx, "create", loc, bucket, key, err)
	if errors.Is(serr, fs.ErrNotExist) && strings.Contains(serr.Error(), "bucket") {
		return serr
	}
	if !errors.Is(serr, fs.ErrNotExist) {
		return serr
	}
	return nil
}

func (w *s3Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.done {
		return 0, pathError("write", w.loc, ErrClosed)
	}
	if err := w.ctx.Err(); err != nil {
		return 0, w.fail(fmt.Errorf("storage: write %s: %w", w.loc, err))
	}
	written := 0
	for len(p) > 0 {
		if w.buf == nil {
			b, err := w.getBuf()
			if err != nil {
				return written, w.fail(err)
			}
			w.buf = b
		}
		if len(w.buf) == cap(w.buf) {
			// Full, and more bytes follow: it is not the last part.
			if err := w.flushPart(); err != nil {
				return written, w.fail(err)
			}
			continue
		}
		n := copy(w.buf[len(w.buf):cap(w.buf)], p)
		w.buf = w.buf[:len(w.buf)+n]
		p = p[n:]
		written += n
		w.n += int64(n)
	}
	return written, nil
}

// ReadFrom reads r straight into part buffers, saving io.Copy's copy.
// A read error is returned as is and leaves the writer usable (the caller
// decides whether to Abort).
func (w *s3Writer) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if w.err != nil {
			return total, w.err
		}
		if w.done {
			return total, pathError("write", w.loc, ErrClosed)
		}
		if err := w.ctx.Err(); err != nil {
			return total, w.fail(fmt.Errorf("storage: write %s: %w", w.loc, err))
		}
		if w.buf == nil {
			b, err := w.getBuf()
			if err != nil {
				return total, w.fail(err)
			}
			w.buf = b
		}
		if len(w.buf) == cap(w.buf) {
			// Full: a last part of exactly part size goes up as a
			// multipart upload of one part, which is as good.
			if err := w.flushPart(); err != nil {
				return total, w.fail(err)
			}
			continue
		}
		n, err := r.Read(w.buf[len(w.buf):cap(w.buf)])
		w.buf = w.buf[:len(w.buf)+n]
		total += int64(n)
		w.n += int64(n)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// getBuf returns an empty part buffer: a reused one, a new one while fewer
// than parallelism+1 exist, or else the next one an upload gives back.
func (w *s3Writer) getBuf() ([]byte, error) {
	select {
	case b := <-w.free:
		return b[:0], nil
	default:
	}
	if w.bufsMade < w.cfg.parallelism+1 {
		w.bufsMade++
		return make([]byte, 0, w.cfg.partSize), nil
	}
	select {
	case b := <-w.free:
		return b[:0], nil
	case <-w.uctx.Done():
		return nil, w.uploadErr()
	}
}

// uploadErr is the first upload failure, or the context's error.
func (w *s3Writer) uploadErr() error {
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("storage: write %s: %w", w.loc, err)
	}
	// The group's context is only cancelled by a failed upload; Wait
	// returns that failure (all uploads stop promptly on the context).
	if err := w.g.Wait(); err != nil {
		return err
	}
	return fmt.Errorf("storage: write %s: %w", w.loc, context.Canceled)
}

// flushPart hands the current buffer to an upload goroutine.
func (w *s3Writer) flushPart() error {
	if w.uploadID == "" {
		id, err := w.cl.core.NewMultipartUpload(w.ctx, w.bucket, w.key, minio.PutObjectOptions{
			UserMetadata: map[string]string{"X-Amz-Checksum-Algorithm": "CRC32C"},
		})
		if err != nil {
			return w.cl.s3Error(w.ctx, "create upload", w.loc, err)
		}
		w.uploadID = id
	}
	if w.partNum == MaxParts {
		return fmt.Errorf("storage: write %s: more than %d parts of %d bytes; use a larger part size (WithPartSize)", w.loc, MaxParts, w.cfg.partSize)
	}
	if err := w.uctx.Err(); err != nil {
		return w.uploadErr()
	}
	w.partNum++
	num, b := w.partNum, w.buf
	w.buf = nil
	w.g.Go(func() error {
		defer func() { w.free <- b }()
		if k := w.inFlight.Add(1); k > w.maxInFlight.Load() {
			w.maxInFlight.Store(k) // a statistic for tests; races only make it smaller
		}
		defer w.inFlight.Add(-1)
		if err := w.uctx.Err(); err != nil {
			return err
		}
		sum := crc32cBase64(b)
		part, err := w.cl.core.PutObjectPart(w.uctx, w.bucket, w.key, w.uploadID, num,
			bytes.NewReader(b), int64(len(b)), minio.PutObjectPartOptions{
				CustomHeader:         http.Header{"X-Amz-Checksum-Crc32c": {sum}},
				DisableContentSha256: true,
			})
		if err != nil {
			start := int64(num-1) * w.cfg.partSize
			return w.cl.s3Error(w.uctx, fmt.Sprintf("upload part %d (bytes %d..%d) of", num, start, start+int64(len(b))), w.loc, err)
		}
		w.partsMu.Lock()
		w.parts = append(w.parts, minio.CompletePart{PartNumber: num, ETag: part.ETag, ChecksumCRC32C: sum})
		w.partsMu.Unlock()
		return nil
	})
	return nil
}

func (w *s3Writer) Commit() error {
	if w.err != nil {
		return w.err
	}
	if w.done {
		if w.ok {
			return nil
		}
		return pathError("commit", w.loc, ErrAborted)
	}
	if err := w.commit(); err != nil {
		return w.fail(err)
	}
	w.done, w.ok = true, true
	w.cancel()
	return nil
}

func (w *s3Writer) commit() error {
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("storage: commit %s: %w", w.loc, err)
	}
	if w.uploadID == "" {
		// Everything fits in one part: one PutObject.
		if !w.cfg.overwrite && commitStatCheck {
			if err := checkTarget(w.ctx, w.cl, w.cfg, w.loc, w.bucket, w.key); err != nil {
				return err
			}
		}
		_, err := w.cl.core.PutObject(w.ctx, w.bucket, w.key, bytes.NewReader(w.buf), int64(len(w.buf)), "", "",
			w.commitOptions(map[string]string{"X-Amz-Checksum-Crc32c": crc32cBase64(w.buf)}))
		if err != nil {
			return w.cl.s3Error(w.ctx, "commit", w.loc, err)
		}
		return nil
	}
	if len(w.buf) > 0 {
		if err := w.flushPart(); err != nil {
			return err
		}
	}
	if err := w.g.Wait(); err != nil {
		return err
	}
	if err := w.ctx.Err(); err != nil {
		return fmt.Errorf("storage: commit %s: %w", w.loc, err)
	}
	if !w.cfg.overwrite && commitStatCheck {
		if err := checkTarget(w.ctx, w.cl, w.cfg, w.loc, w.bucket, w.key); err != nil {
			return err
		}
	}
	sort.Slice(w.parts, func(i, j int) bool { return w.parts[i].PartNumber < w.parts[j].PartNumber })
	if len(w.parts) != w.partNum {
		return fmt.Errorf("storage: commit %s: %d of %d parts uploaded", w.loc, len(w.parts), w.partNum)
	}
	if _, err := w.cl.core.CompleteMultipartUpload(w.ctx, w.bucket, w.key, w.uploadID, w.parts, w.commitOptions(nil)); err != nil {
		return w.cl.s3Error(w.ctx, "commit", w.loc, err)
	}
	w.uploadID = "" // completed: nothing to abort
	return nil
}

// commitStatCheck turns the check for an existing target before commit on
// (tests turn it off to see If-None-Match work alone).
var commitStatCheck = true

// commitOptions are the options of the request that makes the object
// visible. Without overwrite it carries If-None-Match: *, so that the
// server refuses atomically when another writer committed the key since
// our check (AWS S3, MinIO and versitygw honour it; a server that ignores
// it still had the check).
func (w *s3Writer) commitOptions(meta map[string]string) minio.PutObjectOptions {
	o := minio.PutObjectOptions{UserMetadata: meta, DisableContentSha256: true}
	if !w.cfg.overwrite {
		o.SetMatchETagExcept("*")
	}
	return o
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc32cBase64 is the CRC-32C of b as S3's x-amz-checksum-crc32c wants it.
// The server checks every part against it (instead of a SHA-256 of the
// payload, which costs far more CPU on both ends), and TCP/TLS protect
// the rest.
func crc32cBase64(b []byte) string {
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], crc32.Checksum(b, castagnoli))
	return base64.StdEncoding.EncodeToString(sum[:])
}

// fail makes err sticky, aborts the upload and returns err (joined with
// the abort's error, if that failed too).
func (w *s3Writer) fail(err error) error {
	if aerr := w.abort(); aerr != nil {
		err = errors.Join(err, aerr)
	}
	w.err = err
	return err
}

func (w *s3Writer) Abort() error {
	if w.done {
		return nil
	}
	return w.abort()
}

func (w *s3Writer) abort() error {
	if w.done {
		return nil
	}
	w.done = true
	settle := w.inFlight.Load() > 0
	w.cancel()
	w.g.Wait() // in-flight parts stop on the cancelled context
	w.buf = nil
	if w.uploadID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), abortTimeout)
	defer cancel()
	id := w.uploadID
	if err := w.cl.abortUpload(ctx, w.bucket, w.key, id, settle); err != nil {
		return fmt.Errorf("storage: abort %s: multipart upload %s is left behind (invisible to readers; remove it with AbortIncompleteUploads or a lifecycle rule): %w", w.loc, id, err)
	}
	w.uploadID = ""
	return nil
}

// abortUpload aborts a multipart upload and checks that it is gone. Part
// uploads the client gave up on (settle is true when there were some) may
// still be running in the server and recreate the upload after the abort,
// so, as the S3 documentation advises, it then waits a little, aborts
// again and checks again, until the upload stays gone.
func (cl *s3Client) abortUpload(ctx context.Context, bucket, key, id string, settle bool) error {
	loc := "s3://" + bucket + "/" + key
	delay := 50 * time.Millisecond
	clean := 0 // consecutive checks that did not list the upload
	for attempt := 0; ; attempt++ {
		if err := cl.core.AbortMultipartUpload(ctx, bucket, key, id); err != nil {
			if serr := cl.s3Error(ctx, "abort", loc, err); !errors.Is(serr, fs.ErrNotExist) {
				return serr
			}
		}
		res, err := cl.core.ListMultipartUploads(ctx, bucket, key, "", "", "", 1000)
		if err != nil {
			return cl.s3Error(ctx, "abort", loc, err)
		}
		found := false
		for _, u := range res.Uploads {
			found = found || u.UploadID == id
		}
		if found {
			clean = 0
		} else {
			clean++
		}
		if clean > 0 && (!settle || clean == 3) {
			return nil
		}
		if attempt == 10 {
			return fmt.Errorf("storage: abort %s: upload %s still listed after %d aborts", loc, id, attempt+1)
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return cl.s3Error(ctx, "abort", loc, ctx.Err())
		}
		delay = min(2*delay, time.Second)
	}
}
