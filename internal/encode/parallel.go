package encode

import (
	"context"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
)

// Parallel calls fn(lo, hi) for the chunks [0, chunk), [chunk, 2*chunk), ...
// of [0, n) on at most workers goroutines (at least one), each taking the
// next chunk when it is done with one. The first error fn returns stops the
// others from starting a chunk and is returned; so is the cause of ctx
// when it is done before every chunk has started. fn must be safe to call
// concurrently; results it stores by index come out in input order,
// whatever the number of workers.
func Parallel(ctx context.Context, n, workers, chunk int, fn func(lo, hi int) error) error {
	chunk = max(chunk, 1)
	nchunks := (n + chunk - 1) / chunk
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range min(max(workers, 1), nchunks) {
		g.Go(func() error {
			for {
				ci := int(next.Add(1) - 1)
				if ci >= nchunks {
					return nil
				}
				if gctx.Err() != nil {
					return context.Cause(gctx)
				}
				lo := ci * chunk
				if err := fn(lo, min(lo+chunk, n)); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}
