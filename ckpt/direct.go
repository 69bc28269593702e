package ckpt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync/atomic"
	"syscall"

	"golang.org/x/sync/errgroup"
)

// Direct I/O: a local output file is assembled in aligned spans in user
// memory (header bytes and the pieces of every tensor that fall into the
// span, read with pread from the source) and each span is written with
// O_DIRECT. The bytes then go from the span buffer to the device once:
// no second copy into the page cache, no dirty-page writeback to wait for
// at fsync, and the training node's page cache is not flooded with a model
// nobody reads back. Where the file system does not report direct-I/O
// alignment (statx STATX_DIOALIGN: tmpfs, many FUSE and network file
// systems) or refuses an aligned write, the merge falls back to buffered
// writes.
//
// Direct I/O and in-kernel copies are Linux fast paths (direct_linux.go);
// on other systems openDirect reports "unsupported" and every local file
// is written through the buffered path (direct_other.go), with the same
// bytes as the result.

// directAlign is the alignment of span offsets, lengths and buffers; the
// file system's own (dio_offset_align, dio_mem_align) must divide it.
const directAlign = 4096

// Write paths reported in FileResult.IO.
const (
	IODirect   = "direct"          // O_DIRECT writes of aligned spans
	IOFallback = "direct+buffered" // direct I/O refused mid-file; the rest written buffered
	IOKernel   = "copy_file_range" // in-kernel copies where possible, user buffers elsewhere
	IOBuffered = "buffered"        // positioned writes from user buffers
	// IOSequential: a local file written front to back by one writer
	// (WriteSequential, and WriteAuto on a FUSE mount)
	IOSequential = "sequential"
	IOStreamed   = "streamed" // in order, through a non-positioned sink (S3)
)

// directWriteAt writes one span through the O_DIRECT descriptor (a
// variable so that tests can make the file system refuse it).
var directWriteAt = func(f *os.File, p []byte, off int64) (int, error) { return f.WriteAt(p, off) }

// spanLayout is the copy plan of one file for span writes: the file's
// boxes in offset order.
type spanLayout struct {
	f     *OutFile
	boxes []box
	ends  []int64 // ends[i]: byte after boxes[i]
}

func newSpanLayout(f *OutFile, boxBytes int64) *spanLayout {
	l := &spanLayout{f: f}
	for _, t := range f.Tensors {
		isz := int64(max(t.Item.DType.Size(), t.DType.Size()))
		forBoxes(t, max(boxBytes/isz, 1), func(bx box) error {
			l.boxes = append(l.boxes, bx)
			l.ends = append(l.ends, bx.off+bx.n*int64(t.DType.Size()))
			return nil
		})
	}
	sort.Sort(byOffset(*l)) // f.Tensors are in file order already; keep it robust
	return l
}

type byOffset spanLayout

func (l byOffset) Len() int           { return len(l.boxes) }
func (l byOffset) Less(i, j int) bool { return l.boxes[i].off < l.boxes[j].off }
func (l byOffset) Swap(i, j int) {
	l.boxes[i], l.boxes[j] = l.boxes[j], l.boxes[i]
	l.ends[i], l.ends[j] = l.ends[j], l.ends[i]
}

// fill writes bytes [s, s+len(dst)) of the file into dst.
func (l *spanLayout) fill(dst []byte, s int64, sc *fillScratch) error {
	e := s + int64(len(dst))
	if h := int64(len(l.f.Header)); s < h {
		copy(dst, l.f.Header[s:min(e, h)])
	}
	for i := sort.Search(len(l.ends), func(i int) bool { return l.ends[i] > s }); i < len(l.boxes) && l.boxes[i].off < e; i++ {
		bx := l.boxes[i]
		bs, be := bx.off, l.ends[i]
		if bs >= s && be <= e {
			if err := fillOut(bx, dst[bs-s:be-s], sc); err != nil {
				return fmt.Errorf("tensor %q: %w", bx.t.Name, err)
			}
			continue
		}
		// the box straddles the span's edge: make it whole, keep our part
		whole := grow(&sc.box, be-bs)
		if err := fillOut(bx, whole, sc); err != nil {
			return fmt.Errorf("tensor %q: %w", bx.t.Name, err)
		}
		lo, hi := max(bs, s), min(be, e)
		copy(dst[lo-s:hi-s], whole[lo-bs:hi-bs])
	}
	return nil
}

// writeFileDirect writes f into the local temporary file of lo (the caller
// commits): spans of BufferSize bytes, filled and written by workers in
// parallel, each through dio (O_DIRECT) until the file system refuses one,
// then buffered. It returns the write path used.
func writeFileDirect(ctx context.Context, f *OutFile, lo LocalOutput, dio *os.File, name string, o *MergeOptions) (string, error) {
	span := int64(max(o.BufferSize, directAlign)+directAlign-1) &^ (directAlign - 1)
	// boxes much smaller than a span, so that the few straddling an edge
	// (read twice) cost little
	layout := newSpanLayout(f, max(min(int64(o.BufferSize), span/8), 64))
	nspans := (f.Size + span - 1) / span
	var next atomic.Int64
	var fellBack atomic.Bool
	g, gctx := errgroup.WithContext(ctx)
	for range o.Parallelism {
		g.Go(func() error {
			buf, err := spanBuf(int(span))
			if err != nil {
				return fmt.Errorf("%s: span buffer: %w", name, err)
			}
			defer freeSpanBuf(buf)
			var sc fillScratch
			for {
				i := next.Add(1) - 1
				if i >= nspans || gctx.Err() != nil {
					return nil
				}
				s := i * span
				n := min(span, f.Size-s)
				if err := layout.fill(buf[:n], s, &sc); err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				// the last span is written whole (zero tail); the file is
				// truncated to its size afterwards
				wn := (n + directAlign - 1) &^ (directAlign - 1)
				clear(buf[n:wn])
				if err := writeSpan(dio, lo.File(), buf[:wn], s, &fellBack); err != nil {
					return fmt.Errorf("%s: write at byte %d: %w", name, s, err)
				}
				if o.OnProgress != nil {
					o.OnProgress(n)
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if err := lo.File().Truncate(f.Size); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	if fellBack.Load() {
		return IOFallback, nil
	}
	return IODirect, nil
}

// writeSpan writes p at off through dio, or through buf (the buffered
// descriptor) once the file system has refused a direct write with EINVAL
// (alignment it did not report) or EOPNOTSUPP.
func writeSpan(dio, buf *os.File, p []byte, off int64, fellBack *atomic.Bool) error {
	if !fellBack.Load() {
		_, err := directWriteAt(dio, p, off)
		if err == nil || !(errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.EOPNOTSUPP)) {
			return err
		}
		fellBack.Store(true)
	}
	_, err := buf.WriteAt(p, off)
	return err
}
