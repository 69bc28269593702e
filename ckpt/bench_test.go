package ckpt

import (
	"context"
	"os"
	"testing"

	"github.com/ferryml/ferry/internal/testutil/synthckpt"
)

// BenchmarkMerge merges a 32 MiB checkpoint (4 ranks, dim-0 chunks) into a
// local file on each write path (direct I/O, in-kernel copies, user-space
// buffers), and with a bf16 cast.
func BenchmarkMerge(b *testing.B) {
	src := b.TempDir()
	n := synthckpt.HFShards(b, src, 8, 1024, 1024, 4)
	ctx := context.Background()
	ck, err := OpenDir(ctx, src)
	if err != nil {
		b.Fatal(err)
	}
	defer ck.Close()
	for _, c := range []struct {
		name string
		po   PlanOptions
		mo   MergeOptions
	}{
		{"path=direct", PlanOptions{}, MergeOptions{}},
		{"path=kernel", PlanOptions{}, MergeOptions{NoDirectIO: true}},
		{"path=buffers", PlanOptions{}, MergeOptions{NoDirectIO: true, NoKernelCopy: true}},
		{"cast=bf16", PlanOptions{DType: BF16}, MergeOptions{}},
	} {
		b.Run(c.name, func(b *testing.B) {
			sel, skip, _ := SelectTensors(ck.Meta, KeyOptions{})
			p, err := NewPlan(sel, skip, c.po)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(n)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				out := b.TempDir()
				if _, err := Merge(ctx, ck, p, DirSink(out), c.mo); err != nil {
					b.Fatal(err)
				}
				os.RemoveAll(out)
			}
		})
	}
}
