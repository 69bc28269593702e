package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/ferryml/ferry/ckpt"
	"github.com/ferryml/ferry/internal/cli"
)

var rankFileRE = regexp.MustCompile(`^__([0-9]+)_[0-9]+\.distcp$`)

type inspectTensor struct {
	Key    string   `json:"key"`
	Path   []string `json:"path,omitempty"`
	DType  string   `json:"dtype"`
	Shape  []int64  `json:"shape"`
	Bytes  int64    `json:"bytes"`
	Chunks int      `json:"chunks"`
	Files  []string `json:"files"`
}

type inspectBytes struct {
	Key    string `json:"key"`
	File   string `json:"file"`
	Length int64  `json:"length"`
}

type inspectReport struct {
	Checkpoint  string            `json:"checkpoint"`
	Format      string            `json:"format"`
	Class       string            `json:"metadata_class,omitempty"`
	Version     string            `json:"version,omitempty"`
	PlannerData bool              `json:"planner_data"`
	StorageMeta bool              `json:"storage_meta"`
	Ranks       int               `json:"ranks"`
	Files       int               `json:"files"`
	TensorBytes int64             `json:"tensor_bytes"`
	Parameters  int64             `json:"parameters"`
	DTypes      map[string]int    `json:"dtypes"`
	Tensors     []inspectTensor   `json:"tensors"`
	BytesItems  []inspectBytes    `json:"bytes_items,omitempty"`
	OutputNames map[string]string `json:"output_names,omitempty"`
	Skipped     []ckpt.Skipped    `json:"skipped,omitempty"`
}

func inspectMain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ckptmerge inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.Bool("json", false, "print the report as JSON")
	includeOpt := fs.Bool("include-optimizer", false, "show output names for training-state tensors too")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: ckptmerge inspect [--json] CKPT\n\nLists the tensors of a checkpoint (dtype, shape, chunks, bytes, files), its bytes items and\nranks, and the names ckptmerge would write. The checkpoint is fully validated (chunk\ncoverage, file bounds) as a merge would.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	pos, err := cli.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return fmt.Errorf("%w: inspect wants one CKPT argument", errUsage)
	}
	dir, note, err := ckpt.Locate(ctx, pos[0])
	if err != nil {
		return err
	}
	if note != "" && !*jsonOut {
		fmt.Fprintf(stderr, "ckptmerge: %s\n", note)
	}
	ck, err := ckpt.Open(ctx, ckpt.SourceFor(dir))
	if err != nil {
		return err
	}
	defer ck.Close()
	md := ck.Meta
	r := inspectReport{Checkpoint: dir, Format: ck.Format, Class: md.Class, Version: md.Version,
		PlannerData: md.HasPlannerData, StorageMeta: md.HasStorageMeta, DTypes: map[string]int{}}
	files := map[string]bool{}
	ranks := map[string]bool{}
	for _, it := range md.Items {
		if it.Kind == ckpt.KindBytes {
			r.BytesItems = append(r.BytesItems, inspectBytes{it.Key, it.Bytes.File, it.Bytes.Length})
			files[it.Bytes.File] = true
			continue
		}
		t := inspectTensor{Key: it.Key, Path: it.Path, DType: string(it.DType), Shape: it.Shape, Bytes: it.NumBytes(), Chunks: len(it.Chunks)}
		seen := map[string]bool{}
		for _, ch := range it.Chunks {
			files[ch.Loc.File] = true
			if !seen[ch.Loc.File] {
				seen[ch.Loc.File] = true
				t.Files = append(t.Files, ch.Loc.File)
			}
		}
		r.Tensors = append(r.Tensors, t)
		r.TensorBytes += t.Bytes
		r.Parameters += it.NumElements()
		r.DTypes[string(it.DType)]++
	}
	for f := range files {
		if m := rankFileRE.FindStringSubmatch(f); m != nil {
			ranks[m[1]] = true
		}
	}
	r.Files, r.Ranks = len(files), len(ranks)
	sel, skipped, err := ckpt.SelectTensors(md, ckpt.KeyOptions{IncludeOptimizer: *includeOpt})
	if err != nil {
		return err
	}
	r.Skipped = skipped
	r.OutputNames = map[string]string{}
	for _, s := range sel {
		if s.Name != s.Item.Key {
			r.OutputNames[s.Item.Key] = s.Name
		}
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	fmt.Fprintf(stdout, "checkpoint %s (%s", dir, r.Format)
	if r.Class != "" {
		fmt.Fprintf(stdout, ", %s", r.Class)
	}
	if r.Version != "" {
		fmt.Fprintf(stdout, ", version %s", r.Version)
	}
	fmt.Fprintf(stdout, ")\n%d tensors, %d parameters, %s, %d bytes items, %d files, %d ranks\n\n",
		len(r.Tensors), r.Parameters, human(r.TensorBytes), len(r.BytesItems), r.Files, r.Ranks)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tDTYPE\tSHAPE\tCHUNKS\tBYTES\tFILES\tOUTPUT NAME")
	for _, t := range r.Tensors {
		out := r.OutputNames[t.Key]
		if out == "" {
			out = "="
		}
		for _, s := range skipped {
			if s.Key == t.Key {
				out = "(skipped: " + s.Reason + ")"
			}
		}
		fs := strings.Join(t.Files, ",")
		if len(t.Files) > 3 {
			fs = fmt.Sprintf("%s,... (%d)", strings.Join(t.Files[:3], ","), len(t.Files))
		}
		fmt.Fprintf(tw, "%s\t%s\t%v\t%d\t%d\t%s\t%s\n", t.Key, t.DType, t.Shape, t.Chunks, t.Bytes, fs, out)
	}
	tw.Flush()
	if len(r.BytesItems) > 0 {
		fmt.Fprintln(stdout, "\nbytes items (not written):")
		sort.Slice(r.BytesItems, func(i, j int) bool { return r.BytesItems[i].Key < r.BytesItems[j].Key })
		for _, b := range r.BytesItems {
			fmt.Fprintf(stdout, "  %s (%d bytes in %s)\n", b.Key, b.Length, b.File)
		}
	}
	return nil
}
