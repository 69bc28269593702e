package ckpt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
)

// seqSink hides the positioned writes of a DirSink (the path S3 outputs
// take) and can fail after a byte budget (a full disk).
type seqSink struct {
	Sink
	budget  atomic.Int64 // bytes left before writes fail; <0: unlimited
	created []string
}

type seqOut struct {
	out OutputFile
	s   *seqSink
}

func (o *seqOut) Write(p []byte) (int, error) {
	if o.s.budget.Load() >= 0 && o.s.budget.Add(-int64(len(p))) < 0 {
		return 0, &os.PathError{Op: "write", Path: "x", Err: syscall.ENOSPC}
	}
	return o.out.Write(p)
}
func (o *seqOut) Commit() error { return o.out.Commit() }
func (o *seqOut) Abort() error  { return o.out.Abort() }

func (s *seqSink) Create(ctx context.Context, name string, size int64, overwrite bool) (OutputFile, error) {
	out, err := s.Sink.Create(ctx, name, size, overwrite)
	if err != nil {
		return nil, err
	}
	s.created = append(s.created, name)
	return &seqOut{out: out, s: s}, nil
}

func planFor(t *testing.T, ck *Checkpoint, po PlanOptions) *Plan {
	t.Helper()
	sel, skip, err := SelectTensors(ck.Meta, KeyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPlan(sel, skip, po)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func TestSequentialSinkSameBytes(t *testing.T) {
	dir := filepath.Join(fixtureRoot, "torch-1.13", "tp-ws2")
	ck, err := OpenDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	out := t.TempDir()
	s := &seqSink{Sink: DirSink(out)}
	s.budget.Store(-1)
	if _, err := Merge(context.Background(), ck, planFor(t, ck, PlanOptions{}), s, MergeOptions{Parallelism: 3, BufferSize: 100, Verify: true}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(out, "model.safetensors"))
	want, _ := os.ReadFile(filepath.Join(dir, "expected.safetensors"))
	if !bytes.Equal(got, want) {
		t.Fatal("sequential output differs from expected.safetensors")
	}
}

func TestFailedMergeLeavesNothing(t *testing.T) {
	dir := filepath.Join(fixtureRoot, "torch-1.13", "mixed-ws4")
	ck, err := OpenDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, budget := range []int64{0, 100, 15000, 30000, 45000} {
		t.Run(fmt.Sprint("budget=", budget), func(t *testing.T) {
			out := t.TempDir()
			s := &seqSink{Sink: DirSink(out)}
			s.budget.Store(budget)
			_, err := Merge(context.Background(), ck, planFor(t, ck, PlanOptions{MaxShardSize: 12000}), s, MergeOptions{Parallelism: 2, BufferSize: 512})
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("err = %v, want ENOSPC", err)
			}
			if left := listDir(t, out); len(left) != 0 {
				t.Fatalf("a failed merge left %v", left)
			}
		})
	}
}

func TestCancelledMergeLeavesNothing(t *testing.T) {
	ck, err := OpenDir(context.Background(), filepath.Join(fixtureRoot, "torch-1.13", "fsdp1-fp32-ws2"))
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	for _, after := range []int64{1, 5000, 40000} {
		ctx, cancel := context.WithCancel(context.Background())
		var n atomic.Int64
		out := t.TempDir()
		_, err := Merge(ctx, ck, planFor(t, ck, PlanOptions{MaxShardSize: 30000}), DirSink(out), MergeOptions{
			Parallelism: 2, BufferSize: 256,
			OnProgress: func(k int64) {
				if n.Add(k) >= after {
					cancel()
				}
			}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancel after %d bytes: err = %v, want context.Canceled", after, err)
		}
		if left := listDir(t, out); len(left) != 0 {
			t.Fatalf("cancel after %d bytes left %v", after, left)
		}
	}
}

func TestExistingOutput(t *testing.T) {
	dir := filepath.Join(fixtureRoot, "torch-1.13", "fsdp1-bf16-ws4")
	ck, err := OpenDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	out := t.TempDir()
	ctx := context.Background()
	if _, err := Merge(ctx, ck, planFor(t, ck, PlanOptions{MaxShardSize: 10000}), DirSink(out), MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	before := listDir(t, out)
	if len(before) != 7 { // 6 shards + index
		t.Fatalf("files %v, want 6 shards and the index", before)
	}
	_, err = Merge(ctx, ck, planFor(t, ck, PlanOptions{}), DirSink(out), MergeOptions{})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("second merge: err = %v, want ErrExists", err)
	}
	if after := listDir(t, out); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("a refused merge changed the output: %v -> %v", before, after)
	}
	os.WriteFile(filepath.Join(out, "README.md"), []byte("keep me"), 0o644)
	if _, err := Merge(ctx, ck, planFor(t, ck, PlanOptions{}), DirSink(out), MergeOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if after := listDir(t, out); fmt.Sprint(after) != "[README.md model.safetensors]" {
		t.Fatalf("after --force: %v, want README.md and model.safetensors only", after)
	}
}

func TestConfigFromAndIndex(t *testing.T) {
	dir := filepath.Join(fixtureRoot, "torch-1.13", "fsdp1-bf16-ws2")
	cfg := t.TempDir()
	for _, n := range []string{"config.json", "tokenizer.json", "generation_config.json", "unrelated.bin"} {
		os.WriteFile(filepath.Join(cfg, n), []byte(`{"name":"`+n+`"}`), 0o644)
	}
	out, res := mergeDir(t, dir, KeyOptions{}, PlanOptions{MaxShardSize: 20000}, MergeOptions{ConfigFrom: DirSource(cfg)})
	if fmt.Sprint(res.Copied) != "[config.json generation_config.json tokenizer.json]" {
		t.Fatalf("copied %v", res.Copied)
	}
	if _, err := os.Stat(filepath.Join(out, "unrelated.bin")); err == nil {
		t.Fatal("copied a file that is not a config file")
	}
	b, err := os.ReadFile(filepath.Join(out, IndexName))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"total_size": 46530`) || !strings.Contains(string(b), `"lm_head.weight": "model-0000`) {
		t.Fatalf("index:\n%s", b)
	}
	var total int64
	for _, f := range res.Files {
		fh, _ := os.Open(filepath.Join(out, f.Name))
		st, _ := fh.Stat()
		h, err := ParseSafetensorsHeader(fh, st.Size(), f.Name)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		total += h.DataSize
		if h.Metadata["format"] != "pt" {
			t.Fatalf("%s: __metadata__ %v", f.Name, h.Metadata)
		}
	}
	if total != 46530 {
		t.Fatalf("shards hold %d tensor bytes, want 46530", total)
	}
}

func TestShardSplitRule(t *testing.T) {
	mk := func(name string, n int64) Selected {
		return Selected{Name: name, Item: &Item{Key: name, DType: U8, Shape: []int64{n}}}
	}
	// huggingface_hub's example: [6, 6, 2, 6, 2, 2] GB with a 10 GB limit
	// gives [6], [6+2], [6+2+2]; a tensor above the limit gets its own shard.
	sel := []Selected{mk("a", 6), mk("b", 6), mk("c", 2), mk("d", 6), mk("e", 2), mk("f", 2), mk("g", 11), mk("h", 1)}
	p, err := NewPlan(sel, nil, PlanOptions{MaxShardSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range p.Files {
		var names []string
		for _, t := range f.Tensors {
			names = append(names, t.Name)
		}
		got = append(got, f.Name+":"+strings.Join(names, "+"))
	}
	want := "[model-00001-of-00005.safetensors:a model-00002-of-00005.safetensors:b+c model-00003-of-00005.safetensors:g model-00004-of-00005.safetensors:d+e+f model-00005-of-00005.safetensors:h]"
	if fmt.Sprint(got) != want {
		t.Fatalf("shards %v\nwant %s", got, want)
	}
}

func TestKeyCleaning(t *testing.T) {
	item := func(key string, path ...string) *Item {
		return &Item{Key: key, Path: path, DType: F32, Shape: []int64{1}}
	}
	tests := []struct {
		name    string
		md      *Metadata
		ko      KeyOptions
		want    string
		wantErr error
	}{
		{"accelerate with planner_data", &Metadata{HasPlannerData: true, Items: []*Item{
			item("model.model.embed_tokens.weight", "model", "model.embed_tokens.weight"),
			item("model.lm_head.weight", "model", "lm_head.weight"),
			item("optimizer.state.lm_head.weight.exp_avg", "optimizer", "state", "lm_head.weight", "exp_avg")}},
			KeyOptions{}, "[model.embed_tokens.weight lm_head.weight]", nil},
		{"accelerate without planner_data", &Metadata{Items: []*Item{item("model.model.norm.weight"), item("model.lm_head.weight")}},
			KeyOptions{}, "[model.norm.weight lm_head.weight]", nil},
		{"raw HF keys kept", &Metadata{Items: []*Item{item("model.norm.weight"), item("lm_head.weight")}},
			KeyOptions{}, "[model.norm.weight lm_head.weight]", nil},
		{"wrappers", &Metadata{Items: []*Item{item("_orig_mod.layers.0._fsdp_wrapped_module._checkpoint_wrapped_module.mlp.weight"), item("_orig_mod.norm.weight")}},
			KeyOptions{}, "[layers.0.mlp.weight norm.weight]", nil},
		{"ddp module prefix", &Metadata{Items: []*Item{item("module.a"), item("module.b")}}, KeyOptions{}, "[a b]", nil},
		{"keep keys", &Metadata{Items: []*Item{item("module._orig_mod.a")}}, KeyOptions{KeepKeys: true}, "[module._orig_mod.a]", nil},
		{"torchtitan flat", &Metadata{HasPlannerData: true, Items: []*Item{item("tok_embeddings.weight", "tok_embeddings.weight"),
			item("optimizer.state.tok_embeddings.weight.exp_avg", "optimizer", "state", "tok_embeddings.weight", "exp_avg"),
			item("lr_scheduler.last_epoch", "lr_scheduler", "last_epoch")}}, KeyOptions{}, "[tok_embeddings.weight]", nil},
		{"include optimizer", &Metadata{HasPlannerData: true, Items: []*Item{item("model.w", "model", "w"),
			item("optimizer.state.w.exp_avg", "optimizer", "state", "w", "exp_avg")}}, KeyOptions{IncludeOptimizer: true},
			"[w optimizer.state.w.exp_avg]", nil},
		{"PyTorch recipe: {app: AppState}", &Metadata{HasPlannerData: true, Items: []*Item{
			item("app.model.model.norm.weight", "app", "model", "model.norm.weight"),
			item("app.model.lm_head.weight", "app", "model", "lm_head.weight"),
			item("app.optim.state.lm_head.weight.exp_avg", "app", "optim", "state", "lm_head.weight", "exp_avg"),
			item("app.optim.state.lm_head.weight.step", "app", "optim", "state", "lm_head.weight", "step"),
			{Key: "app.optim.param_groups.0.lr", Path: []string{"app", "optim", "param_groups", "0", "lr"}, Kind: KindBytes}}},
			KeyOptions{}, "[model.norm.weight lm_head.weight]", nil},
		{"PyTorch recipe with the optimizer", &Metadata{HasPlannerData: true, Items: []*Item{
			item("app.model.lm_head.weight", "app", "model", "lm_head.weight"),
			item("app.optim.state.lm_head.weight.exp_avg", "app", "optim", "state", "lm_head.weight", "exp_avg")}},
			KeyOptions{IncludeOptimizer: true}, "[lm_head.weight optim.state.lm_head.weight.exp_avg]", nil},
		{"shared root, model only", &Metadata{HasPlannerData: true, Items: []*Item{
			item("app.model.w", "app", "model", "w"), item("app.model.v", "app", "model", "v")}},
			KeyOptions{}, "[w v]", nil},
		{"shared root, bytes items elsewhere", &Metadata{HasPlannerData: true, Items: []*Item{
			{Key: "epoch", Path: []string{"epoch"}, Kind: KindBytes},
			item("app.model.w", "app", "model", "w"), item("app.optim.state.w.step", "app", "optim", "state", "w", "step")}},
			KeyOptions{}, "[w]", nil},
		{"shared root kept with keep keys", &Metadata{HasPlannerData: true, Items: []*Item{
			item("app.model.w", "app", "model", "w"), item("app.optim.state.w.step", "app", "optim", "state", "w", "step")}},
			KeyOptions{KeepKeys: true}, "[app.model.w]", nil},
		{"optimizer-only checkpoint stays training state", &Metadata{HasPlannerData: true, Items: []*Item{
			item("optimizer.state.w.exp_avg", "optimizer", "state", "w", "exp_avg"),
			item("optimizer.state.v.exp_avg", "optimizer", "state", "v", "exp_avg")}},
			KeyOptions{}, "[]", nil},
		{"strip and rename", &Metadata{Items: []*Item{item("base_model.layers.0.attn.w")}},
			KeyOptions{StripPrefixes: []string{"base_model."}, Renames: []Rename{mustRename(t, `layers\.(\d+)\.attn=layers.$1.self_attn`)}},
			"[layers.0.self_attn.w]", nil},
		{"collision", &Metadata{Items: []*Item{item("a.w"), item("b.w")}}, KeyOptions{StripPrefixes: []string{"a.", "b."}}, "", ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sel, _, err := SelectTensors(tt.md, tt.ko)
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			var names []string
			for _, s := range sel {
				names = append(names, s.Name)
			}
			if err == nil && fmt.Sprint(names) != tt.want {
				t.Fatalf("names %v, want %s", names, tt.want)
			}
		})
	}
}

func mustRename(t *testing.T, s string) Rename {
	r, err := ParseRename(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var _ = io.EOF

func TestExistingConfigNeedsForce(t *testing.T) {
	dir := filepath.Join(fixtureRoot, "torch-1.13", "fsdp1-bf16-ws2")
	ck, err := OpenDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	cfg, out := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(cfg, "config.json"), []byte("new"), 0o644)
	os.WriteFile(filepath.Join(out, "config.json"), []byte("old"), 0o644)
	_, err = Merge(context.Background(), ck, planFor(t, ck, PlanOptions{}), DirSink(out), MergeOptions{ConfigFrom: DirSource(cfg)})
	if !errors.Is(err, ErrExists) {
		t.Fatalf("err = %v, want ErrExists", err)
	}
	if got := listDir(t, out); fmt.Sprint(got) != "[config.json]" {
		t.Fatalf("refused merge wrote %v", got)
	}
	if _, err := Merge(context.Background(), ck, planFor(t, ck, PlanOptions{}), DirSink(out), MergeOptions{ConfigFrom: DirSource(cfg), Force: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "config.json")); string(b) != "new" {
		t.Fatalf("config.json = %q after --force", b)
	}
}

func TestVerifyDetectsCorruption(t *testing.T) {
	dir := filepath.Join(fixtureRoot, "torch-1.13", "tp-ws2")
	ck, err := OpenDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer ck.Close()
	p := planFor(t, ck, PlanOptions{})
	out := t.TempDir()
	if _, err := Merge(context.Background(), ck, p, DirSink(out), MergeOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(context.Background(), ck, p, DirSource(out), 2, 128); err != nil {
		t.Fatalf("clean output: %v", err)
	}
	path := filepath.Join(out, "model.safetensors")
	b, _ := os.ReadFile(path)
	b[len(b)-100] ^= 1
	os.WriteFile(path, b, 0o644)
	_, err = Verify(context.Background(), ck, p, DirSource(out), 2, 128)
	if !errors.Is(err, ErrVerify) || !strings.Contains(err.Error(), "differs from the source") {
		t.Fatalf("corrupted output: err = %v, want ErrVerify", err)
	}
}
