package ckpt

import (
	"context"
	"path/filepath"
	"testing"
)

// The copy hot path (assembling a box from chunks, casting) allocates
// nothing once its buffers exist.
func TestHotPathAllocs(t *testing.T) {
	ck, err := OpenDir(context.Background(), filepath.Join(fixtureRoot, "torch-1.13", "tp-ws2"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	var dim1 *OutTensor
	for _, it := range ck.Meta.Items {
		if it.Key == "model.layers.0.self_attn.o_proj.weight" { // chunks split along dim 1
			dim1 = &OutTensor{Name: it.Key, Item: it, DType: it.DType, Shape: it.Shape}
		}
	}
	if dim1 == nil {
		t.Fatal("no dim-1 sharded tensor in tp-ws2")
	}
	var boxes []box
	forBoxes(dim1, 200, func(b box) error { boxes = append(boxes, b); return nil })
	buf := make([]byte, 1<<16)
	scratch := make([]byte, 1<<16)
	out := make([]byte, 1<<17)
	if n := testing.AllocsPerRun(50, func() {
		for _, b := range boxes {
			if err := fillBox(b, buf[:b.n*2], &scratch); err != nil {
				t.Fatal(err)
			}
			castInto(out, F32, buf, BF16, int(b.n))
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run, want 0", n)
	}
}
