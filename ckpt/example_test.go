package ckpt_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ferryml/ferry/ckpt"
)

// Merge a 4-rank FSDP checkpoint into one safetensors file, casting to
// bfloat16 and verifying the result against the source.
func Example() {
	ctx := context.Background()
	ck, err := ckpt.OpenDir(ctx, "../testdata/dcp/torch-1.13/fsdp1-fp32-ws2")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ck.Close()
	sel, skipped, err := ckpt.SelectTensors(ck.Meta, ckpt.KeyOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	plan, err := ckpt.NewPlan(sel, skipped, ckpt.PlanOptions{DType: ckpt.BF16})
	if err != nil {
		fmt.Println(err)
		return
	}
	out, _ := os.MkdirTemp("", "ckpt-example")
	defer os.RemoveAll(out)
	res, err := ckpt.Merge(ctx, ck, plan, ckpt.DirSink(out), ckpt.MergeOptions{Verify: true})
	if err != nil {
		fmt.Println(err)
		return
	}
	st, _ := os.Stat(filepath.Join(out, res.Files[0].Name))
	fmt.Println(res.Files[0].Name, len(res.Tensors), "tensors", st.Size(), "bytes, verified:", res.Verified)
	// Output: model.safetensors 21 tensors 48642 bytes, verified: true
}
