package ckpt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeSTShards writes a checkpoint in the HF storage writer layout: nt F32
// tensors [rows, cols] split along dim 0 over ranks files.
func writeSTShards(tb testing.TB, dir string, nt, rows, cols, ranks int) int64 {
	rng := rand.New(rand.NewSource(1))
	per := rows / ranks
	for r := 0; r < ranks; r++ {
		info := map[string]map[string][]int{}
		var entries []string
		off := 0
		for i := 0; i < nt; i++ {
			name := fmt.Sprintf("layers.%d.w", i)
			info[name] = map[string][]int{"saved_offsets": {r * per, 0}}
			n := per * cols * 4
			entries = append(entries, fmt.Sprintf(`%q:{"dtype":"F32","shape":[%d,%d],"data_offsets":[%d,%d]}`, name, per, cols, off, off+n))
			off += n
		}
		ib, _ := json.Marshal(info)
		mb, _ := json.Marshal(map[string]string{"DCP_SHARDING_INFO": string(ib)})
		h := `{"__metadata__":` + string(mb) + "," + strings.Join(entries, ",") + "}"
		buf := binary.LittleEndian.AppendUint64(nil, uint64(len(h)))
		buf = append(buf, h...)
		data := make([]byte, off)
		rng.Read(data)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("shard-%05d-model-00001-of-00001.safetensors", r+1)), append(buf, data...), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return int64(nt * rows * cols * 4)
}

// BenchmarkMerge merges a 32 MiB checkpoint (4 ranks, dim-0 chunks) into a
// local file: in-kernel copies, user-space buffers, and with a bf16 cast.
func BenchmarkMerge(b *testing.B) {
	src := b.TempDir()
	n := writeSTShards(b, src, 8, 1024, 1024, 4)
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
		{"path=kernel", PlanOptions{}, MergeOptions{}},
		{"path=buffers", PlanOptions{}, MergeOptions{NoKernelCopy: true}},
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
