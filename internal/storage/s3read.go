package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"
)

// rangeAttempts is how often one ranged GET is tried when the connection
// breaks mid-body (the request itself is retried by minio-go).
const rangeAttempts = 3

// s3Object is one opened object version: every read is pinned to its ETag,
// so a reader never mixes bytes of two versions.
type s3Object struct {
	ctx    context.Context
	cl     *s3Client
	loc    string
	bucket string
	key    string
	etag   string
	size   int64
	cfg    *config
}

func statForRead(ctx context.Context, loc string, cfg *config) (*s3Object, error) {
	bucket, key, err := parseS3(loc, true)
	if err != nil {
		return nil, err
	}
	cl, err := clientFor(cfg)
	if err != nil {
		return nil, err
	}
	oi, err := cl.core.StatObject(ctx, bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return nil, cl.headError(ctx, "open", loc, bucket, key, err)
	}
	return &s3Object{ctx: ctx, cl: cl, loc: loc, bucket: bucket, key: key, etag: oi.ETag, size: oi.Size, cfg: cfg}, nil
}

// readRange fills p with the bytes at [off, off+len(p)), which must lie
// inside the object.
func (o *s3Object) readRange(ctx context.Context, p []byte, off int64) error {
	var lastErr error
	for attempt := 0; attempt < rangeAttempts && len(p) > 0; attempt++ {
		var opts minio.GetObjectOptions
		if o.etag != "" {
			opts.SetMatchETag(o.etag)
		}
		if err := opts.SetRange(off, off+int64(len(p))-1); err != nil {
			return err
		}
		body, _, _, err := o.cl.core.GetObject(ctx, o.bucket, o.key, opts)
		if err != nil {
			if r := minio.ToErrorResponse(err); r.Code == "PreconditionFailed" || r.StatusCode == 412 {
				return fmt.Errorf("storage: read %s at byte %d: %w", o.loc, off, ErrChanged)
			}
			return o.cl.s3Error(ctx, "read", o.loc, err)
		}
		n, err := io.ReadFull(body, p)
		body.Close()
		p, off = p[n:], off+int64(n)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return o.cl.s3Error(ctx, "read", o.loc, err)
		}
		lastErr = err // connection broke mid-body: fetch the rest again
	}
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("storage: read %s at byte %d: %w", o.loc, off, scrub(lastErr))
}

// s3Reader implements Reader with ranged GETs; reads of more than two
// read chunks are split into chunk-sized ranges fetched in parallel.
type s3Reader struct {
	*s3Object
	mu     sync.Mutex
	closed bool
}

func openS3(ctx context.Context, loc string, cfg *config) (Reader, error) {
	o, err := statForRead(ctx, loc, cfg)
	if err != nil {
		return nil, err
	}
	return &s3Reader{s3Object: o}, nil
}

func (r *s3Reader) Size() int64 { return r.size }

func (r *s3Reader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	return nil
}

func (r *s3Reader) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return 0, pathError("read", r.loc, ErrClosed)
	}
	if off < 0 {
		return 0, pathError("read", r.loc, errors.New("negative offset"))
	}
	if off >= r.size {
		if len(p) == 0 {
			return 0, nil
		}
		return 0, io.EOF
	}
	n := len(p)
	if rest := r.size - off; int64(n) > rest {
		n = int(rest)
	}
	buf := p[:n]
	chunk := int(r.cfg.readChunk)
	if n <= 2*chunk || r.cfg.parallelism == 1 {
		if err := r.readRange(r.ctx, buf, off); err != nil {
			return 0, err
		}
	} else {
		g, gctx := errgroup.WithContext(r.ctx)
		g.SetLimit(r.cfg.parallelism)
		for start := 0; start < n; start += chunk {
			piece := buf[start:min(start+chunk, n)]
			at := off + int64(start)
			g.Go(func() error { return r.readRange(gctx, piece, at) })
		}
		if err := g.Wait(); err != nil {
			return 0, err
		}
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// s3Stream reads an object front to back. Objects up to one read chunk are
// read with one GET; larger ones with up to parallelism chunk-sized ranged
// GETs in flight ahead of the reader, delivered in order.
type s3Stream struct {
	o      *s3Object
	cancel context.CancelFunc
	body   io.ReadCloser // single-GET mode

	results chan chan chunk // prefetch mode: in order
	free    chan []byte
	cur     chunk
	pos     int
	wg      sync.WaitGroup
	err     error
	closed  bool
}

type chunk struct {
	buf []byte
	err error
}

func openS3Stream(ctx context.Context, loc string, cfg *config) (io.ReadCloser, int64, error) {
	o, err := statForRead(ctx, loc, cfg)
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	o.ctx = ctx
	s := &s3Stream{o: o, cancel: cancel}
	if o.size <= cfg.readChunk || cfg.parallelism == 1 {
		var opts minio.GetObjectOptions
		if o.etag != "" {
			opts.SetMatchETag(o.etag)
		}
		body, _, _, err := o.cl.core.GetObject(ctx, o.bucket, o.key, opts)
		if err != nil {
			cancel()
			return nil, 0, o.cl.s3Error(ctx, "read", loc, err)
		}
		s.body = body
		return s, o.size, nil
	}
	par := cfg.parallelism
	s.results = make(chan chan chunk, par+1) // buffers (free tokens) are the limit, not this queue
	s.free = make(chan []byte, par+1)
	for range par + 1 {
		s.free <- nil // allocation tokens: buffers are made on first use
	}
	s.wg.Add(1)
	go s.produce(ctx, cfg.readChunk)
	return s, o.size, nil
}

// produce starts one fetch per chunk, in order, each as soon as a buffer is
// free, and queues its result channel for Read.
func (s *s3Stream) produce(ctx context.Context, partSize int64) {
	defer s.wg.Done()
	defer close(s.results)
	for off := int64(0); off < s.o.size; off += partSize {
		n := min(partSize, s.o.size-off)
		var buf []byte
		select {
		case buf = <-s.free:
		case <-ctx.Done():
			return
		}
		if buf == nil {
			buf = make([]byte, partSize)
		}
		buf = buf[:n]
		res := make(chan chunk, 1)
		s.wg.Add(1)
		go func(off int64) {
			defer s.wg.Done()
			err := s.o.readRange(ctx, buf, off)
			res <- chunk{buf: buf, err: err}
		}(off)
		select {
		case s.results <- res:
		case <-ctx.Done():
			return
		}
	}
}

func (s *s3Stream) Read(p []byte) (int, error) {
	if s.closed {
		return 0, pathError("read", s.o.loc, ErrClosed)
	}
	if s.err != nil {
		return 0, s.err
	}
	if s.body != nil {
		n, err := s.body.Read(p)
		if err != nil && err != io.EOF {
			s.err = s.o.cl.s3Error(s.o.ctx, "read", s.o.loc, err)
			return n, s.err
		}
		return n, err
	}
	for s.pos == len(s.cur.buf) {
		if s.cur.buf != nil {
			s.free <- s.cur.buf[:cap(s.cur.buf)]
			s.cur = chunk{}
		}
		res, ok := <-s.results
		if !ok {
			if err := s.o.ctx.Err(); err != nil {
				s.err = fmt.Errorf("storage: read %s: %w", s.o.loc, err)
				return 0, s.err
			}
			s.err = io.EOF
			return 0, io.EOF
		}
		c := <-res
		if c.err != nil {
			s.err = c.err
			return 0, s.err
		}
		s.cur, s.pos = c, 0
	}
	n := copy(p, s.cur.buf[s.pos:])
	s.pos += n
	return n, nil
}

// WriteTo lets io.Copy take each fetched part without an extra copy.
func (s *s3Stream) WriteTo(w io.Writer) (int64, error) {
	if s.body != nil && !s.closed && s.err == nil {
		n, err := io.Copy(w, onlyReader{s.body})
		if err != nil && s.o.ctx.Err() != nil {
			err = fmt.Errorf("storage: read %s: %w", s.o.loc, s.o.ctx.Err())
		}
		return n, err
	}
	var total int64
	for {
		if s.pos < len(s.cur.buf) {
			n, err := w.Write(s.cur.buf[s.pos:])
			total += int64(n)
			s.pos += n
			if err != nil {
				return total, err
			}
		}
		if _, err := s.Read(nil); err != nil {
			if err == io.EOF {
				return total, nil
			}
			return total, err
		}
	}
}

type onlyReader struct{ io.Reader }

func (s *s3Stream) Close() error {
	if s.closed {
		return nil
	}
	s.closed = true
	s.cancel()
	if s.body != nil {
		s.body.Close()
	}
	if s.results != nil {
		// The producer waits on the context; fetchers send into buffered
		// channels: neither can block now. No goroutine outlives Close.
		s.wg.Wait()
	}
	return nil
}
