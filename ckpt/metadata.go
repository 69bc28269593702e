package ckpt

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/ferryml/ferry/internal/corrupt"
)

// ItemKind tells tensors from bytes items.
type ItemKind uint8

const (
	// KindTensor is a tensor (TensorStorageMetadata).
	KindTensor ItemKind = iota
	// KindBytes is an opaque value saved with torch.save (BytesStorageMetadata).
	KindBytes
)

func (k ItemKind) String() string {
	if k == KindBytes {
		return "bytes"
	}
	return "tensor"
}

// Location is where an item's bytes live: [Offset, Offset+Length) of File.
type Location struct {
	File   string `json:"file"`
	Offset int64  `json:"offset"`
	Length int64  `json:"length"`
	// Transforms are the stream transforms (e.g. "stream.zstd/1") applied
	// to the bytes, in the order they were applied; empty when none.
	Transforms []string `json:"transforms,omitempty"`
}

// Chunk is one saved piece of a tensor: a hyper-rectangle of the global
// tensor starting at Offsets with extent Sizes.
type Chunk struct {
	Offsets []int64  `json:"offsets"`
	Sizes   []int64  `json:"sizes"`
	Loc     Location `json:"location"`

	data *chunkData // where the elements are, filled by Open
}

// Item is one entry of the checkpoint's state dict.
type Item struct {
	// Key is the flat key as saved (state_dict_metadata key).
	Key string `json:"key"`
	// Path is the original nested path (planner_data), nil when absent.
	Path  []string `json:"path,omitempty"`
	Kind  ItemKind `json:"-"`
	DType DType    `json:"dtype,omitempty"`
	// Shape is the global shape; [] for a 0-dim tensor.
	Shape  []int64 `json:"shape"`
	Chunks []Chunk `json:"chunks,omitempty"`
	// Bytes is the location of a bytes item.
	Bytes *Location `json:"bytes,omitempty"`
}

// NumElements returns the element count of the global tensor.
func (it *Item) NumElements() int64 { return numel(it.Shape) }

// NumBytes returns the byte size of the global tensor.
func (it *Item) NumBytes() int64 { return numel(it.Shape) * int64(it.DType.Size()) }

// Metadata is the decoded .metadata of a DCP checkpoint.
type Metadata struct {
	// Items in state-dict order.
	Items []*Item
	// Version is Metadata.version ("1.0.0"), empty when absent.
	Version string
	// HasPlannerData is set when planner_data (the flatten mapping) exists.
	HasPlannerData bool
	// HasStorageMeta is set when storage_meta is present and not None.
	HasStorageMeta bool
	// Class is the module path of the pickled Metadata class.
	Class string
}

// maxDims is the most dimensions a tensor may have.
const maxDims = maxDimsConst

// maxDimsConst is the most dimensions a tensor may have.
const maxDimsConst = 64

func numel(shape []int64) int64 {
	n := int64(1)
	for _, d := range shape {
		n *= d
	}
	return n
}

func fmtShape(s []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, d := range s {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(d, 10))
	}
	b.WriteByte(']')
	return b.String()
}

// fmtBox renders a chunk as "[o0:e0, o1:e1]" (global index ranges).
func fmtBox(off, size []int64) string {
	var b strings.Builder
	b.WriteByte('[')
	for i := range off {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d:%d", off[i], off[i]+size[i])
	}
	b.WriteByte(']')
	return b.String()
}

func storageKey(fqn string, offsets []int64) string {
	if offsets == nil {
		return fqn + "\x00-"
	}
	return fqn + "\x00" + fmtShape(offsets)
}

// ParseMetadata decodes the bytes of a .metadata file. name is used in
// error messages. It never executes anything from the pickle; unknown
// classes become inert values, and only the DCP classes are interpreted
// (matched by class name under both the torch 1.13 and the >= 2.0 module
// paths).
func ParseMetadata(data []byte, name string) (*Metadata, error) {
	if len(data) > MaxMetadataSize {
		return nil, fmt.Errorf("%s: %w: %d bytes, limit %d", name, ErrLimit, len(data), MaxMetadataSize)
	}
	v, err := unpickle(data, name)
	if err != nil {
		return nil, err
	}
	bad := func(format string, args ...any) error {
		return corrupt.New(ErrCorrupt, name, -1, format, args...)
	}
	root, ok := v.(*pyObject)
	if !ok || !root.Class.is("Metadata") {
		return nil, bad("top-level object is %s, want a DCP Metadata", describe(v))
	}
	md := &Metadata{Class: root.Class.String()}
	attrs := pyAttrs(root)
	sdm, ok := pyDictEntries(attrs["state_dict_metadata"])
	if !ok {
		return nil, bad("state_dict_metadata is %s, want a dict", describe(attrs["state_dict_metadata"]))
	}
	if s, ok := attrs["version"].(string); ok {
		md.Version = s
	}
	if sm, ok := attrs["storage_meta"]; ok && sm != nil {
		md.HasStorageMeta = true
	}
	// storage_data: MetadataIndex -> _StorageInfo
	storage := map[string]Location{}
	sd, ok := pyDictEntries(attrs["storage_data"])
	if !ok {
		return nil, bad("storage_data is %s, want a dict", describe(attrs["storage_data"]))
	}
	for i, e := range sd {
		ko, ok := e.Key.(*pyObject)
		if !ok {
			return nil, bad("storage_data entry %d: key is %s, want MetadataIndex", i, describe(e.Key))
		}
		ka := pyAttrs(ko)
		fqn, ok := ka["fqn"].(string)
		if !ok {
			return nil, bad("storage_data entry %d: MetadataIndex without fqn", i)
		}
		var offs []int64
		if o, ok := ka["offset"]; ok && o != nil {
			if offs, ok = pySize(o); !ok {
				return nil, bad("storage_data entry %d (%q): offset is %s", i, fqn, describe(o))
			}
		}
		vo, ok := e.Value.(*pyObject)
		if !ok {
			return nil, bad("storage_data entry %d (%q): value is %s, want _StorageInfo", i, fqn, describe(e.Value))
		}
		va := pyAttrs(vo)
		loc := Location{}
		if loc.File, ok = va["relative_path"].(string); !ok {
			return nil, bad("storage_data entry %d (%q): %s has no relative_path", i, fqn, vo.Class)
		}
		var ok1, ok2 bool
		loc.Offset, ok1 = pyInt(va["offset"])
		loc.Length, ok2 = pyInt(va["length"])
		if !ok1 || !ok2 || loc.Offset < 0 || loc.Length < 0 {
			return nil, bad("storage_data entry %d (%q): bad offset/length %s/%s", i, fqn, describe(va["offset"]), describe(va["length"]))
		}
		if td, ok := va["transform_descriptors"]; ok && td != nil {
			items, ok := pyItems(td)
			if !ok {
				return nil, bad("storage_data entry %d (%q): transform_descriptors is %s", i, fqn, describe(td))
			}
			for _, t := range items {
				s, ok := t.(string)
				if !ok {
					return nil, bad("storage_data entry %d (%q): transform descriptor is %s", i, fqn, describe(t))
				}
				loc.Transforms = append(loc.Transforms, s)
			}
		}
		if err := CheckRelPath(loc.File); err != nil {
			return nil, fmt.Errorf("%s: storage_data entry %d (%q): %w", name, i, fqn, err)
		}
		storage[storageKey(fqn, offs)] = loc
	}
	// planner_data: flat key -> path tuple
	paths := map[string][]string{}
	if pd, ok := pyDictEntries(attrs["planner_data"]); ok {
		md.HasPlannerData = true
		for _, e := range pd {
			k, ok := e.Key.(string)
			if !ok {
				continue
			}
			items, ok := pyItems(e.Value)
			if !ok {
				continue
			}
			p := make([]string, 0, len(items))
			for _, it := range items {
				switch x := it.(type) {
				case string:
					p = append(p, x)
				default:
					if n, ok := pyInt(x); ok {
						p = append(p, strconv.FormatInt(n, 10))
					} else {
						p = nil
					}
				}
				if p == nil {
					break
				}
			}
			if p != nil {
				paths[k] = p
			}
		}
	}
	seen := map[string]bool{}
	for _, e := range sdm {
		key, ok := e.Key.(string)
		if !ok {
			return nil, bad("state_dict_metadata key is %s, want str", describe(e.Key))
		}
		if seen[key] {
			return nil, bad("state_dict_metadata key %q appears twice", key)
		}
		seen[key] = true
		o, ok := e.Value.(*pyObject)
		if !ok {
			return nil, bad("%q: metadata is %s", key, describe(e.Value))
		}
		it := &Item{Key: key, Path: paths[key]}
		switch {
		case o.Class.is("BytesStorageMetadata"):
			it.Kind = KindBytes
			loc, ok := storage[storageKey(key, nil)]
			if !ok {
				return nil, bad("bytes item %q has no storage_data entry", key)
			}
			it.Bytes = &loc
		case o.Class.is("TensorStorageMetadata"):
			if err := decodeTensorMeta(it, o, storage); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		default:
			return nil, bad("%q: unknown storage metadata class %s", key, o.Class)
		}
		md.Items = append(md.Items, it)
	}
	return md, nil
}

func decodeTensorMeta(it *Item, o *pyObject, storage map[string]Location) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: tensor %q: %s", ErrCorrupt, it.Key, fmt.Sprintf(format, args...))
	}
	a := pyAttrs(o)
	props, ok := a["properties"].(*pyObject)
	if !ok {
		return bad("properties is %s", describe(a["properties"]))
	}
	var dt any
	if t, ok := pyItems(props.State); ok && len(t) > 0 {
		dt = t[0]
	} else if pa := pyAttrs(props); pa["dtype"] != nil {
		dt = pa["dtype"]
	}
	cls, ok := dt.(*pyClass)
	if !ok || cls.Module != "torch" {
		return bad("dtype is %s", describe(dt))
	}
	d, ok := dtypeByTorch[cls.Name]
	if !ok {
		return fmt.Errorf("%w: tensor %q: dtype torch.%s", ErrUnsupported, it.Key, cls.Name)
	}
	it.DType = d
	if it.Shape, ok = pySize(a["size"]); !ok {
		return bad("size is %s", describe(a["size"]))
	}
	if err := checkShape(it.Shape, d); err != nil {
		return bad("%v", err)
	}
	chunks, ok := pyItems(a["chunks"])
	if !ok {
		return bad("chunks is %s", describe(a["chunks"]))
	}
	for ci, c := range chunks {
		co, ok := c.(*pyObject)
		if !ok || !co.Class.is("ChunkStorageMetadata") {
			return bad("chunk %d is %s", ci, describe(c))
		}
		ca := pyAttrs(co)
		offs, ok1 := pySize(ca["offsets"])
		sizes, ok2 := pySize(ca["sizes"])
		if !ok1 || !ok2 || len(offs) != len(it.Shape) || len(sizes) != len(it.Shape) {
			return bad("chunk %d: offsets %s sizes %s do not match shape %s", ci, describe(ca["offsets"]), describe(ca["sizes"]), fmtShape(it.Shape))
		}
		loc, ok := storage[storageKey(it.Key, offs)]
		if !ok {
			return bad("chunk %d %s has no storage_data entry", ci, fmtBox(offs, sizes))
		}
		it.Chunks = append(it.Chunks, Chunk{Offsets: offs, Sizes: sizes, Loc: loc})
	}
	return nil
}

// checkShape rejects negative dimensions and shapes whose byte size does
// not fit in an int64.
func checkShape(shape []int64, d DType) error {
	if len(shape) > maxDims {
		return fmt.Errorf("%d dimensions, limit %d", len(shape), maxDims)
	}
	n := int64(max(d.Size(), 1))
	for _, s := range shape {
		if s < 0 {
			return fmt.Errorf("negative dimension in %s", fmtShape(shape))
		}
		if s != 0 && n > math.MaxInt64/4/s {
			return fmt.Errorf("shape %s too large", fmtShape(shape))
		}
		n *= s
	}
	return nil
}

// describe names a decoded pickle value's type for error messages.
func describe(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case *pyObject:
		return "an instance of " + x.Class.String()
	case *pyClass:
		return "class " + x.String()
	case string:
		return strconv.Quote(x)
	default:
		return fmt.Sprintf("%T", v)
	}
}
