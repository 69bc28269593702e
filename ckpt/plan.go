package ckpt

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// DefaultMaxShardSize is huggingface_hub's MAX_SHARD_SIZE and the
// save_pretrained default of transformers 4.x: 5 GB (decimal).
const DefaultMaxShardSize = 5_000_000_000

// IndexName is the name of the index written for sharded outputs.
const IndexName = "model.safetensors.index.json"

// ParseSize parses a shard size the way transformers does: an integer
// number of bytes or a number followed by KB/MB/GB/TB (powers of 10) or
// KiB/MiB/GiB/TiB (powers of 2), case-insensitive.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	u := strings.ToUpper(t)
	mult := int64(1)
	for _, x := range []struct {
		suf string
		m   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}} {
		if strings.HasSuffix(u, x.suf) {
			u, mult = strings.TrimSpace(u[:len(u)-len(x.suf)]), x.m
			break
		}
	}
	f, err := strconv.ParseFloat(u, 64)
	if err != nil || f <= 0 || f*float64(mult) > 1<<62 {
		return 0, fmt.Errorf("%w: size %q: want e.g. 5GB, 500MB, 2GiB or a byte count", ErrConfig, s)
	}
	return int64(f * float64(mult)), nil
}

// PlanOptions controls the output layout.
type PlanOptions struct {
	// DType casts floating tensors (F16, BF16, F32, F64) to this type;
	// empty keeps every tensor's type. Integer and bool tensors are never
	// cast.
	DType DType
	// MaxShardSize splits the output into several files above this many
	// tensor bytes (default DefaultMaxShardSize); a tensor larger than it
	// gets a file of its own (huggingface_hub's rule).
	MaxShardSize int64
	// Metadata is the safetensors "__metadata__" (default {"format": "pt"}).
	Metadata [][2]string
}

// OutTensor is one tensor of the output.
type OutTensor struct {
	Name  string
	Item  *Item
	DType DType
	Shape []int64
	Size  int64 // bytes
	File  int   // index into Plan.Files
	// Offset is the absolute byte offset of the tensor in its file.
	Offset int64
}

// OutFile is one output safetensors file.
type OutFile struct {
	Name    string
	Header  []byte // the 8-byte length, the JSON, the padding
	Size    int64  // total file size
	Tensors []*OutTensor
}

// Plan is the complete output layout, known before any byte is copied.
type Plan struct {
	Files []*OutFile
	// Tensors in state-dict order.
	Tensors []*OutTensor
	// TotalSize is the sum of tensor bytes (index metadata.total_size).
	TotalSize int64
	Skipped   []Skipped
}

// Sharded reports whether the output has several files and an index.
func (p *Plan) Sharded() bool { return len(p.Files) > 1 }

// NewPlan lays out the output: tensors are assigned to files in state-dict
// order, split at MaxShardSize as huggingface_hub does; inside each file
// they are ordered as the safetensors library orders them (alignment of the
// dtype descending, then name), so a one-file output is byte-identical to
// safetensors.torch.save_file of the consolidated state dict.
func NewPlan(sel []Selected, skipped []Skipped, o PlanOptions) (*Plan, error) {
	if o.MaxShardSize == 0 {
		o.MaxShardSize = DefaultMaxShardSize
	}
	if o.MaxShardSize < 0 {
		return nil, fmt.Errorf("%w: max shard size %d", ErrConfig, o.MaxShardSize)
	}
	if o.Metadata == nil {
		o.Metadata = [][2]string{{"format", "pt"}}
	}
	if o.DType != "" && !o.DType.IsFloat() {
		return nil, fmt.Errorf("%w: output dtype %s (want F32, F16 or BF16)", ErrConfig, o.DType)
	}
	p := &Plan{Skipped: skipped}
	for _, s := range sel {
		d := s.Item.DType
		if o.DType != "" && d.IsFloat() {
			d = o.DType
		}
		t := &OutTensor{Name: s.Name, Item: s.Item, DType: d, Shape: s.Item.Shape,
			Size: numel(s.Item.Shape) * int64(d.Size())}
		p.Tensors = append(p.Tensors, t)
		p.TotalSize += t.Size
	}
	// huggingface_hub split_state_dict_into_shards_factory
	var shards [][]*OutTensor
	var cur []*OutTensor
	var curSize int64
	for _, t := range p.Tensors {
		if t.Size > o.MaxShardSize {
			shards = append(shards, []*OutTensor{t})
			continue
		}
		if curSize+t.Size > o.MaxShardSize && len(cur) > 0 {
			shards = append(shards, cur)
			cur, curSize = nil, 0
		}
		cur = append(cur, t)
		curSize += t.Size
	}
	if len(cur) > 0 || len(shards) == 0 {
		shards = append(shards, cur)
	}
	for i, ts := range shards {
		name := "model.safetensors"
		if len(shards) > 1 {
			name = fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		}
		sort.SliceStable(ts, func(a, b int) bool {
			ra, rb := dtypes[ts[a].DType].rank, dtypes[ts[b].DType].rank
			if ra != rb {
				return ra > rb
			}
			return ts[a].Name < ts[b].Name
		})
		entries := make([]headerEntry, len(ts))
		var off int64
		for j, t := range ts {
			entries[j] = headerEntry{Name: t.Name, DType: t.DType, Shape: t.Shape, Begin: off, End: off + t.Size}
			off += t.Size
			t.File = i
		}
		h := encodeHeader(o.Metadata, entries)
		at := int64(len(h))
		for _, t := range ts {
			t.Offset = at
			at += t.Size
		}
		p.Files = append(p.Files, &OutFile{Name: name, Header: h, Size: at, Tensors: ts})
	}
	return p, nil
}

// IndexJSON renders model.safetensors.index.json for a sharded plan:
// metadata.total_size and a weight_map sorted by tensor name.
func (p *Plan) IndexJSON() []byte {
	names := make([]string, len(p.Tensors))
	for i, t := range p.Tensors {
		names[i] = t.Name
	}
	sort.Strings(names)
	byName := map[string]*OutTensor{}
	for _, t := range p.Tensors {
		byName[t.Name] = t
	}
	var params int64
	for _, t := range p.Tensors {
		params += numel(t.Shape)
	}
	b := []byte("{\n  \"metadata\": {\n    \"total_parameters\": ")
	b = strconv.AppendInt(b, params, 10)
	b = append(b, ",\n    \"total_size\": "...)
	b = strconv.AppendInt(b, p.TotalSize, 10)
	b = append(b, "\n  },\n  \"weight_map\": {"...)
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, "\n    "...)
		b = appendJSONString(b, n)
		b = append(b, ": "...)
		b = appendJSONString(b, p.Files[byName[n].File].Name)
	}
	b = append(b, "\n  }\n}\n"...)
	return b
}
