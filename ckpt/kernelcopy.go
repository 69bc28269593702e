package ckpt

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// kernelCopier copies byte ranges between local files inside the kernel
// (copy_file_range through os.File.ReadFrom), with descriptors of its own
// so that file offsets are not shared between workers.
type kernelCopier struct {
	dstPath string
	dst     *os.File
	srcs    map[*osFile]*os.File
	failed  bool
}

func (k *kernelCopier) close() {
	if k.dst != nil {
		k.dst.Close()
	}
	for _, f := range k.srcs {
		f.Close()
	}
}

// copy copies n bytes from src at srcOff to the output at dstOff; ok is
// false when this path cannot be used (the caller falls back to buffers).
func (k *kernelCopier) copy(src *osFile, srcOff int64, dstOff, n int64) (ok bool, err error) {
	if k.failed || src.reopen == nil {
		return false, nil
	}
	if k.dst == nil {
		if k.dst, err = os.OpenFile(k.dstPath, os.O_WRONLY, 0); err != nil {
			k.failed = true
			return false, nil
		}
	}
	sf := k.srcs[src]
	if sf == nil {
		if sf, err = src.reopen(); err != nil {
			k.failed = true
			return false, nil
		}
		if k.srcs == nil {
			k.srcs = map[*osFile]*os.File{}
		}
		k.srcs[src] = sf
	}
	if _, err := sf.Seek(srcOff, io.SeekStart); err != nil {
		return true, err
	}
	if _, err := k.dst.Seek(dstOff, io.SeekStart); err != nil {
		return true, err
	}
	m, err := k.dst.ReadFrom(io.LimitReader(sf, n))
	if err == nil && m != n {
		err = fmt.Errorf("copied %d of %d bytes: %w", m, n, io.ErrUnexpectedEOF)
	}
	return true, err
}

// tryKernelCopy copies a box with kernelCopier when every piece of it is a
// contiguous range of a local row-major chunk and no cast is needed.
func tryKernelCopy(bx box, kc *kernelCopier) (bool, error) {
	t := bx.t
	if kc == nil || t.DType != t.Item.DType {
		return false, nil
	}
	type copyRange struct {
		src          *osFile
		srcOff, dstO int64
		n            int64
	}
	var ranges []copyRange
	isz := int64(t.DType.Size())
	var covered int64
	err := forPieces(bx, func(p piece) error {
		cd := t.Item.Chunks[p.ci].data
		of, ok := cd.f.(*osFile)
		if !ok || !p.full || !cd.rowMaj {
			return errNoFastPath
		}
		ranges = append(ranges, copyRange{of, cd.start() + p.start*isz, bx.off + p.dstElem*isz, p.count * isz})
		covered += p.count
		return nil
	})
	if err == errNoFastPath || covered != bx.n {
		return false, nil
	}
	if err != nil {
		return true, err
	}
	for _, r := range ranges {
		ok, err := kc.copy(r.src, r.srcOff, r.dstO, r.n)
		if !ok {
			// no descriptor for the fast path: redo the whole box with
			// buffers (rewriting pieces already copied is harmless)
			return false, nil
		}
		if err != nil {
			return true, err
		}
	}
	return true, nil
}

var errNoFastPath = errors.New("no fast path")
