package ckpt

import (
	"fmt"
	"io"
)

// Fill: the bytes of an output tensor, region by region ("boxes"), read
// from the chunks that intersect each region and cast when the output
// dtype differs. Every write path (buffered, sequential, streamed, direct)
// and Verify get their bytes from fillOut.

// fillScratch holds one worker's reusable buffers for fillOut.
type fillScratch struct {
	box     []byte // a whole box straddling a direct-I/O span's edge
	src     []byte // source-dtype bytes before a cast
	strided []byte // a chunk piece with partial trailing dimensions
}

// fillOut writes the output bytes of bx (cast when the output dtype
// differs) into dst.
func fillOut(bx box, dst []byte, sc *fillScratch) error {
	t := bx.t
	if t.DType == t.Item.DType {
		return fillBox(bx, dst, &sc.strided)
	}
	src := grow(&sc.src, bx.n*int64(t.Item.DType.Size()))
	if err := fillBox(bx, src, &sc.strided); err != nil {
		return err
	}
	castInto(dst, t.DType, src, t.Item.DType, int(bx.n))
	return nil
}

// box is one unit of copy work: a row-major contiguous region of an output
// tensor. Dimensions before k are fixed at prefix, dimension k spans
// [a, b), dimensions after k are complete.
type box struct {
	t      *OutTensor
	shape  []int64 // the tensor's shape ([1] for a 0-dim tensor)
	k      int
	prefix []int64
	a, b   int64
	inner  int64 // elements per index of dimension k
	off    int64 // absolute byte offset in the output file
	n      int64 // elements
}

// boxes calls fn for the copy units of t in output order.
func forBoxes(t *OutTensor, maxElems int64, fn func(box) error) error {
	shape := t.Shape
	if len(shape) == 0 {
		shape = []int64{1}
	}
	total := numel(shape)
	if total == 0 {
		return nil
	}
	k := 0
	for k < len(shape)-1 && numel(shape[k+1:]) > maxElems {
		k++
	}
	inner := numel(shape[k+1:])
	step := max(1, maxElems/inner)
	isz := int64(t.DType.Size())
	prefix := make([]int64, k)
	off := t.Offset
	for {
		for a := int64(0); a < shape[k]; a += step {
			b := min(a+step, shape[k])
			bx := box{t: t, shape: shape, k: k, prefix: append([]int64(nil), prefix...), a: a, b: b, inner: inner, off: off, n: (b - a) * inner}
			if err := fn(bx); err != nil {
				return err
			}
			off += bx.n * isz
		}
		// next prefix
		d := k - 1
		for ; d >= 0; d-- {
			prefix[d]++
			if prefix[d] < shape[d] {
				break
			}
			prefix[d] = 0
		}
		if d < 0 {
			return nil
		}
	}
}

// chunkGeom returns a chunk's offsets and sizes with 0-dim tensors seen as [1].
func chunkGeom(ch *Chunk) (off, size []int64) {
	if len(ch.Sizes) == 0 {
		return []int64{0}, []int64{1}
	}
	return ch.Offsets, ch.Sizes
}

// intersect returns the rows [lo, hi) along dimension bx.k that a chunk at
// off with sizes sz shares with bx, and the chunk-local row-major element
// index where that region starts (it is contiguous in the chunk); ok is
// false when they share nothing.
func intersect(bx box, off, sz []int64) (lo, hi, start int64, ok bool) {
	k := bx.k
	for d := 0; d < k; d++ {
		if bx.prefix[d] < off[d] || bx.prefix[d] >= off[d]+sz[d] {
			return 0, 0, 0, false
		}
	}
	lo, hi = max(bx.a, off[k]), min(bx.b, off[k]+sz[k])
	if lo >= hi {
		return 0, 0, 0, false
	}
	stride := int64(1)
	for d := len(sz) - 1; d >= 0; d-- {
		var idx int64
		switch {
		case d < k:
			idx = bx.prefix[d] - off[d]
		case d == k:
			idx = lo - off[k]
		}
		start += idx * stride
		stride *= sz[d]
	}
	return lo, hi, start, true
}

// fillBox writes the source-dtype bytes of bx into dst (n x itemsize bytes),
// using scratch for chunks whose trailing dimensions are partial.
func fillBox(bx box, dst []byte, scratch *[]byte) error {
	it := bx.t.Item
	isz := int64(it.DType.Size())
	k := bx.k
	g := bx.shape
	return forPieces(bx, func(p piece) error {
		ci, off, sz, lo, hi, start, count := p.ci, p.off, p.sz, p.lo, p.hi, p.start, p.count
		if p.full {
			dstOff := p.dstElem * isz
			return readChunkRange(it, ci, start, count, dst[dstOff:dstOff+count*isz])
		}
		if int64(cap(*scratch)) < count*isz {
			*scratch = make([]byte, count*isz)
		}
		src := (*scratch)[:count*isz]
		if err := readChunkRange(it, ci, start, count, src); err != nil {
			return err
		}
		// m: last dimension where the chunk is partial; runs of prod(sz[m:])
		m := len(g) - 1
		for sz[m] == g[m] {
			m--
		}
		run := numel(sz[m:])
		var gstrA, outerA, extA [maxDimsConst]int64
		gstr := gstrA[:len(g)]
		for d, n := len(g)-1, int64(1); d >= 0; d-- {
			gstr[d] = n
			n *= g[d]
		}
		// iterate outer indices over dims k..m-1 of the region
		outer := outerA[:m-k]
		ext := extA[:m-k]
		for d := k; d < m; d++ {
			if d == k {
				ext[0] = hi - lo
			} else {
				ext[d-k] = sz[d]
			}
		}
		var so int64
		for {
			// destination element offset within the box
			var do int64
			if m > k {
				do = (lo - bx.a + outer[0]) * bx.inner
				for d := k + 1; d < m; d++ {
					do += (off[d] + outer[d-k]) * gstr[d]
				}
				do += off[m] * gstr[m]
			} else { // m == k: dim k itself is the partial run (not reachable: full would hold)
				do = (lo - bx.a) * bx.inner
			}
			copy(dst[do*isz:(do+run)*isz], src[so*isz:(so+run)*isz])
			so += run
			d := len(outer) - 1
			for ; d >= 0; d-- {
				outer[d]++
				if outer[d] < ext[d] {
					break
				}
				outer[d] = 0
			}
			if d < 0 {
				return nil
			}
		}
	})
}

// readChunkRange reads count elements starting at chunk-local row-major
// element start into dst.
func readChunkRange(it *Item, ci int, start, count int64, dst []byte) error {
	ch := &it.Chunks[ci]
	cd := ch.data
	isz := int64(cd.dtype.Size())
	if cd.rowMaj {
		pos := cd.start() + start*isz
		n, err := cd.f.ReadAt(dst, pos)
		if n == len(dst) {
			return nil
		}
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%s: tensor %q chunk %s: read %d bytes at %d: %w", ch.Loc.File, it.Key, fmtBox(ch.Offsets, ch.Sizes), len(dst), pos, err)
	}
	all, err := gatherChunk(it, ci)
	if err != nil {
		return err
	}
	copy(dst, all[start*isz:(start+count)*isz])
	return nil
}

// gatherChunk returns the row-major bytes of a chunk stored with other
// strides, reading its storage span into memory (at most MaxGatherSize).
func gatherChunk(it *Item, ci int) ([]byte, error) {
	ch := &it.Chunks[ci]
	cd := ch.data
	isz := int64(cd.dtype.Size())
	n := numel(cd.shape)
	span := int64(1)
	for d := range cd.shape {
		span += (cd.shape[d] - 1) * cd.stride[d]
	}
	if span*isz > MaxGatherSize || n*isz > MaxGatherSize {
		return nil, fmt.Errorf("%s: %w: tensor %q chunk %s has strides %s over %d bytes (limit %d for non-row-major chunks)",
			ch.Loc.File, ErrUnsupported, it.Key, fmtBox(ch.Offsets, ch.Sizes), fmtShape(cd.stride), span*isz, MaxGatherSize)
	}
	raw := make([]byte, span*isz)
	if _, err := cd.f.ReadAt(raw, cd.start()); err != nil {
		return nil, fmt.Errorf("%s: tensor %q chunk %s: %w", ch.Loc.File, it.Key, fmtBox(ch.Offsets, ch.Sizes), err)
	}
	out := make([]byte, n*isz)
	idx := make([]int64, len(cd.shape))
	for i := int64(0); i < n; i++ {
		var p int64
		for d := range idx {
			p += idx[d] * cd.stride[d]
		}
		copy(out[i*isz:(i+1)*isz], raw[p*isz:(p+1)*isz])
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < cd.shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out, nil
}

// piece is the part of one chunk that a box needs.
type piece struct {
	ci      int     // the chunk's index in the item
	off, sz []int64 // the chunk's geometry (chunkGeom)
	lo, hi  int64   // rows [lo, hi) along dimension bx.k
	start   int64   // chunk-local row-major element where the piece starts
	count   int64   // elements
	dstElem int64   // element offset of the piece in the box (meaningful when full)
	full    bool    // trailing dimensions complete: contiguous in chunk and box
}

// forPieces calls fn for every piece of a chunk intersecting bx, in chunk
// order; empty chunks have none.
func forPieces(bx box, fn func(p piece) error) error {
	it := bx.t.Item
	k := bx.k
	g := bx.shape
	for ci := range it.Chunks {
		ch := &it.Chunks[ci]
		if ch.data == nil {
			continue // empty chunk
		}
		off, sz := chunkGeom(ch)
		lo, hi, start, ok := intersect(bx, off, sz)
		if !ok {
			continue
		}
		full := true
		for d := k + 1; d < len(g); d++ {
			if sz[d] != g[d] {
				full = false
				break
			}
		}
		p := piece{ci: ci, off: off, sz: sz, lo: lo, hi: hi, start: start,
			count: (hi - lo) * numel(sz[k+1:]), dstElem: (lo - bx.a) * bx.inner, full: full}
		if err := fn(p); err != nil {
			return err
		}
	}
	return nil
}

func grow(b *[]byte, n int64) []byte {
	if int64(cap(*b)) < n {
		*b = make([]byte, n)
	}
	return (*b)[:n]
}
