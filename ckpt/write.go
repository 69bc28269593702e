package ckpt

import (
	"context"
	"fmt"
	"io"
	"os"

	"golang.org/x/sync/errgroup"
)

// writeFile writes one planned file through sink, commits it, and returns
// the write path it took (IODirect, IOKernel, ...).
func writeFile(ctx context.Context, f *OutFile, sink Sink, o *MergeOptions) (path string, err error) {
	out, err := sink.Create(ctx, f.Name, f.Size, o.Force)
	if err != nil {
		return "", fmt.Errorf("%s/%s: %w", sink, f.Name, err)
	}
	defer func() {
		if err != nil {
			out.Abort()
		}
	}()
	lo, _ := out.(LocalOutput)
	sequential := lo != nil && (o.WriteMode == WriteSequential || o.WriteMode == WriteAuto && lo.OnFUSE())
	var dio *os.File
	if lo != nil && !sequential && !o.NoDirectIO {
		dio = openDirect(lo.TempPath())
	}
	switch {
	case sequential:
		// the local file seen only as an io.Writer: one writer, in order
		path, err = IOSequential, writeFileBuffered(ctx, f, struct{ OutputFile }{out}, sink, o)
	case dio != nil:
		path, err = writeFileDirect(ctx, f, lo, dio, fmt.Sprintf("%s/%s", sink, f.Name), o)
		dio.Close()
	case lo != nil && o.kernelCopy():
		path, err = IOKernel, writeFileBuffered(ctx, f, out, sink, o)
	case lo != nil:
		path, err = IOBuffered, writeFileBuffered(ctx, f, out, sink, o)
	default:
		path, err = IOStreamed, writeFileBuffered(ctx, f, out, sink, o)
	}
	if err != nil && lo != nil && lo.OnFUSE() && !sequential && ctx.Err() == nil {
		err = fmt.Errorf("%w (%s is on a FUSE mount, where volumes backed by object stores refuse writes that are not at the end of the file, and write mode %s asked for positioned writes: use write mode sequential, or auto, which picks it there)", err, sink, o.WriteMode)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return "", err
	}
	if err := out.Commit(); err != nil {
		return "", fmt.Errorf("%s/%s: %w", sink, f.Name, err)
	}
	return path, nil
}

type copyJob struct {
	bx   box
	buf  []byte
	n    int64 // bytes produced
	done chan error
}

// writeFileBuffered writes f into out from user buffers: positioned writes
// from the copy workers (with in-kernel copies where possible) into a
// local file, or an in-order stream into any other sink. The caller
// commits.
func writeFileBuffered(ctx context.Context, f *OutFile, out OutputFile, sink Sink, o *MergeOptions) error {
	wa, positioned := out.(io.WriterAt)
	if positioned {
		if _, err := wa.WriteAt(f.Header, 0); err != nil {
			return fmt.Errorf("%s/%s: %w", sink, f.Name, err)
		}
	} else if _, err := out.Write(f.Header); err != nil {
		return fmt.Errorf("%s/%s: %w", sink, f.Name, err)
	}
	if o.OnProgress != nil {
		o.OnProgress(int64(len(f.Header)))
	}
	workers := o.Parallelism
	window := 2 * workers
	// every job a worker can hold is in order (at most window) or held by
	// the writer (one): window+1 buffers never run out.
	pool := make(chan []byte, window+1)
	for i := 0; i < window+1; i++ {
		pool <- nil
	}
	g, gctx := errgroup.WithContext(ctx)
	jobs := make(chan *copyJob)
	order := make(chan *copyJob, window)
	// dispatcher
	g.Go(func() error {
		defer close(jobs)
		defer close(order)
		for _, t := range f.Tensors {
			srcIsz := int64(t.Item.DType.Size())
			maxElems := int64(o.BufferSize) / max(srcIsz, int64(t.DType.Size()))
			err := forBoxes(t, max(maxElems, 1), func(bx box) error {
				j := &copyJob{bx: bx, done: make(chan error, 1)}
				select {
				case order <- j:
				case <-gctx.Done():
					return gctx.Err()
				}
				select {
				case jobs <- j:
				case <-gctx.Done():
					return gctx.Err()
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			var sc fillScratch
			var kc *kernelCopier
			if lo, ok := out.(LocalOutput); ok && o.kernelCopy() {
				kc = &kernelCopier{dstPath: lo.TempPath()}
				defer kc.close()
			}
			for j := range jobs {
				j.done <- runJob(gctx, j, pool, &sc, wa, kc)
			}
			return nil
		})
	}
	// in-order writer (or error collector for positioned writes)
	lo, _ := out.(LocalOutput)
	flushing := make(chan struct{}, 1) // holds a token while a background fsync runs
	g.Go(func() error {
		var written int64 = int64(len(f.Header))
		var flushed int64
		for j := range order {
			var err error
			select {
			case err = <-j.done:
			case <-gctx.Done():
				return gctx.Err()
			}
			if err != nil {
				return fmt.Errorf("%s/%s: tensor %q: %w", sink, f.Name, j.bx.t.Name, err)
			}
			if !positioned {
				if _, err := out.Write(j.buf); err != nil {
					return fmt.Errorf("%s/%s: write at byte %d: %w", sink, f.Name, written, err)
				}
			}
			written += j.n
			if lo != nil && written-flushed >= earlyFlush {
				// start writeback early so the final fsync has less to do
				flushed = written
				select {
				case flushing <- struct{}{}:
					file := lo.File() // taken here: the goroutine may outlive Commit
					go func() { file.Sync(); <-flushing }()
				default:
				}
			}
			if o.OnProgress != nil {
				o.OnProgress(j.n)
			}
			pool <- j.buf
		}
		if written != f.Size {
			return fmt.Errorf("%s/%s: wrote %d bytes, planned %d", sink, f.Name, written, f.Size)
		}
		return nil
	})
	err := g.Wait()
	flushing <- struct{}{} // wait for a background fsync before Commit or Abort
	return err
}

func runJob(ctx context.Context, j *copyJob, pool chan []byte, sc *fillScratch, wa io.WriterAt, kc *kernelCopier) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var buf []byte
	select {
	case buf = <-pool:
	case <-ctx.Done():
		return ctx.Err()
	}
	j.buf = buf // the pool token goes back through the writer
	j.n = j.bx.n * int64(j.bx.t.DType.Size())
	if done, err := tryKernelCopy(j.bx, kc); done {
		if err != nil {
			return fmt.Errorf("copy to byte %d: %w", j.bx.off, err)
		}
		return nil
	}
	bx := j.bx
	buf = grow(&buf, bx.n*int64(bx.t.DType.Size()))
	j.buf = buf
	if err := fillOut(bx, buf, sc); err != nil {
		return err
	}
	if wa != nil {
		if _, err := wa.WriteAt(buf, bx.off); err != nil {
			return fmt.Errorf("write at byte %d: %w", bx.off, err)
		}
	}
	return nil
}

// Verify re-reads the written files through out, checks each header is the
