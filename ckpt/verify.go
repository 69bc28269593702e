package ckpt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"golang.org/x/sync/errgroup"
)

// Verify re-reads the written files through out, checks each header is the
// planned one, and compares every tensor's bytes with the source (read and
// cast again). It returns the SHA-256 of every tensor's output bytes.
func Verify(ctx context.Context, ck *Checkpoint, p *Plan, out Source, parallelism, bufSize int) (map[string]string, error) {
	if parallelism <= 0 {
		parallelism = 4
	}
	if bufSize <= 0 {
		bufSize = DefaultBufferSize
	}
	files := make([]File, len(p.Files))
	defer func() {
		for _, f := range files {
			if f != nil {
				f.Close()
			}
		}
	}()
	for i, pf := range p.Files {
		f, err := out.Open(ctx, pf.Name)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		files[i] = f
		name := out.String() + "/" + pf.Name
		if f.Size() != pf.Size {
			return nil, fmt.Errorf("verify: %s: %w: %d bytes, planned %d", name, ErrVerify, f.Size(), pf.Size)
		}
		h, err := ParseSafetensorsHeader(f, f.Size(), name)
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		if h.DataOffset != int64(len(pf.Header)) || len(h.Tensors) != len(pf.Tensors) {
			return nil, fmt.Errorf("verify: %s: %w: header differs from the plan", name, ErrVerify)
		}
		for k, t := range pf.Tensors {
			ht := h.Tensors[k]
			if ht.Name != t.Name || ht.DType != t.DType || !equalShape(ht.Shape, t.Shape) || h.DataOffset+ht.Begin != t.Offset {
				return nil, fmt.Errorf("verify: %s: %w: tensor %q in header is %q %s%s at %d", name, ErrVerify, t.Name, ht.Name, ht.DType, fmtShape(ht.Shape), ht.Begin)
			}
		}
	}
	sums := make(map[string]string, len(p.Tensors))
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallelism)
	ts := append([]*OutTensor(nil), p.Tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Size > ts[j].Size })
	for _, t := range ts {
		g.Go(func() error {
			h := sha256.New()
			var sc fillScratch
			var wantBuf, got []byte
			f := files[t.File]
			maxElems := int64(bufSize) / int64(max(t.Item.DType.Size(), t.DType.Size()))
			err := forBoxes(t, max(maxElems, 1), func(bx box) error {
				if err := gctx.Err(); err != nil {
					return err
				}
				want := grow(&wantBuf, bx.n*int64(t.DType.Size()))
				if err := fillOut(bx, want, &sc); err != nil {
					return err
				}
				have := grow(&got, int64(len(want)))
				if _, err := f.ReadAt(have, bx.off); err != nil && !errors.Is(err, io.EOF) {
					return err
				}
				if string(have) != string(want) {
					return fmt.Errorf("verify: %s/%s: %w: tensor %q differs from the source in bytes [%d, %d)", out, p.Files[t.File].Name, ErrVerify, t.Name, bx.off, bx.off+int64(len(want)))
				}
				h.Write(have)
				return nil
			})
			if err != nil {
				return err
			}
			mu.Lock()
			sums[t.Name] = hex.EncodeToString(h.Sum(nil))
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return sums, nil
}
