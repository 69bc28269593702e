package ckpt

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"strings"

	"github.com/ferryml/ferry/internal/corrupt"
)

// chunkData locates the elements of one saved chunk inside its file.
type chunkData struct {
	f       File   // the file (or a decoded spill of it)
	file    string // name for messages
	dtype   DType
	shape   []int64
	stride  []int64 // in elements
	offset  int64   // absolute byte offset of storage element 0 in f
	storOff int64   // storage_offset in elements
	storLen int64   // storage length in elements
	rowMaj  bool    // shape/stride are row-major contiguous
}

// start returns the absolute file offset of the chunk's first element.
func (c *chunkData) start() int64 { return c.offset + c.storOff*int64(c.dtype.Size()) }

func isRowMajor(shape, stride []int64) bool {
	want := int64(1)
	for d := len(shape) - 1; d >= 0; d-- {
		if shape[d] != 1 && stride[d] != want {
			return false
		}
		want *= shape[d]
	}
	return true
}

// TensorBlob describes a tensor stored in a torch.save archive.
type TensorBlob struct {
	DType         DType
	Shape         []int64
	Stride        []int64
	StorageOffset int64 // elements
	// DataOffset and DataLength locate the raw storage bytes, relative to
	// the start of the archive.
	DataOffset int64
	DataLength int64
}

// ReadTensorBlob parses a torch.save archive of one tensor occupying
// [0, size) of r (a zip, entries stored uncompressed) and returns where its
// storage bytes are. It reads data.pkl with the inert pickle decoder,
// checks the storage entry is stored uncompressed, that the storage holds
// every element the sizes and strides reach, and that the byte order is
// little-endian. name is used in error messages.
func ReadTensorBlob(r io.ReaderAt, size int64, name string) (*TensorBlob, error) {
	bad := func(format string, args ...any) error {
		return corrupt.New(ErrCorrupt, name, -1, format, args...)
	}
	var head [4]byte
	if _, err := r.ReadAt(head[:], 0); err != nil || !bytes.Equal(head[:], []byte("PK\x03\x04")) {
		return nil, bad("not a torch.save archive (no zip local header at start)")
	}
	zr, err := zip.NewReader(io.NewSectionReader(r, 0, size), size)
	if err != nil {
		return nil, bad("torch.save archive: %v", err)
	}
	var pkl *zip.File
	entries := map[string]*zip.File{}
	for _, f := range zr.File {
		entries[f.Name] = f
		if pkl == nil && (f.Name == "data.pkl" || strings.HasSuffix(f.Name, "/data.pkl")) {
			pkl = f
		}
	}
	if pkl == nil {
		return nil, bad("torch.save archive has no data.pkl")
	}
	prefix := strings.TrimSuffix(pkl.Name, "data.pkl")
	if bo, ok := entries[prefix+"byteorder"]; ok {
		b, err := readEntry(bo, 16)
		if err != nil {
			return nil, bad("byteorder: %v", err)
		}
		if string(b) != "little" {
			return nil, fmt.Errorf("%s: %w: byte order %q", name, ErrUnsupported, b)
		}
	}
	pb, err := readEntry(pkl, maxBlobPickleSize)
	if err != nil {
		return nil, bad("%s: %v", pkl.Name, err)
	}
	v, err := unpickle(pb, name+": "+pkl.Name)
	if err != nil {
		return nil, err
	}
	o, ok := v.(*pyObject)
	for ok && (o.Class.is("_rebuild_parameter") || o.Class.is("_rebuild_parameter_with_state")) && len(o.Args) > 0 {
		o, ok = o.Args[0].(*pyObject)
	}
	if !ok || !(o.Class.is("_rebuild_tensor_v2") || o.Class.is("_rebuild_tensor")) || len(o.Args) < 4 {
		return nil, bad("data.pkl holds %s, want torch._utils._rebuild_tensor_v2", describe(v))
	}
	pid, ok := o.Args[0].(*pyPersistent)
	if !ok {
		return nil, bad("tensor storage is %s, want a persistent id", describe(o.Args[0]))
	}
	st, ok := pyItems(pid.ID)
	if !ok || len(st) < 5 {
		return nil, bad("storage persistent id is %s", describe(pid.ID))
	}
	if s, _ := st[0].(string); s != "storage" {
		return nil, bad("persistent id kind %s, want 'storage'", describe(st[0]))
	}
	cls, ok := st[1].(*pyClass)
	if !ok {
		return nil, bad("storage type is %s", describe(st[1]))
	}
	key, ok := st[2].(string)
	if !ok {
		return nil, bad("storage key is %s", describe(st[2]))
	}
	storNumel, ok := pyInt(st[4])
	if !ok || storNumel < 0 {
		return nil, bad("storage size is %s", describe(st[4]))
	}
	tb := &TensorBlob{}
	if cls.Name == "UntypedStorage" {
		tb.DType = U8 // numel counts bytes; caller checks against metadata
	} else if d, ok := dtypeByStorage[cls.Name]; ok {
		tb.DType = d
	} else {
		return nil, fmt.Errorf("%s: %w: storage type %s", name, ErrUnsupported, cls)
	}
	if tb.StorageOffset, ok = pyInt(o.Args[1]); !ok || tb.StorageOffset < 0 {
		return nil, bad("storage_offset is %s", describe(o.Args[1]))
	}
	if tb.Shape, ok = pySize(o.Args[2]); !ok {
		return nil, bad("size is %s", describe(o.Args[2]))
	}
	if tb.Stride, ok = pySize(o.Args[3]); !ok || len(tb.Stride) != len(tb.Shape) {
		return nil, bad("stride is %s for size %s", describe(o.Args[3]), fmtShape(tb.Shape))
	}
	if err := checkShape(tb.Shape, tb.DType); err != nil {
		return nil, bad("%v", err)
	}
	de, ok := entries[prefix+"data/"+key]
	if !ok {
		return nil, bad("storage entry %sdata/%s missing", prefix, key)
	}
	if de.Method != zip.Store || de.CompressedSize64 != de.UncompressedSize64 {
		return nil, fmt.Errorf("%s: %w: storage entry %s is compressed (method %d)", name, ErrUnsupported, de.Name, de.Method)
	}
	off, err := de.DataOffset()
	if err != nil {
		return nil, bad("storage entry %s: %v", de.Name, err)
	}
	isz := int64(tb.DType.Size())
	if de.UncompressedSize64 > uint64(size) || off < 0 || off > size-int64(de.UncompressedSize64) {
		return nil, bad("storage entry %s: bytes [%d, %d) past end of the %d-byte archive", de.Name, off, off+int64(de.UncompressedSize64), size)
	}
	if storNumel > int64(de.UncompressedSize64)/isz {
		return nil, bad("storage entry %s: %d elements of %d bytes do not fit in %d bytes", de.Name, storNumel, isz, de.UncompressedSize64)
	}
	tb.DataOffset, tb.DataLength = off, storNumel*isz
	// every reachable element must lie inside the storage
	if numel(tb.Shape) > 0 {
		last := tb.StorageOffset
		for d := range tb.Shape {
			if tb.Stride[d] < 0 {
				return nil, bad("negative stride %s", fmtShape(tb.Stride))
			}
			last += (tb.Shape[d] - 1) * tb.Stride[d]
			if last < 0 {
				return nil, bad("stride %s overflows", fmtShape(tb.Stride))
			}
		}
		if last >= storNumel {
			return nil, bad("size %s stride %s offset %d reach element %d of a %d-element storage", fmtShape(tb.Shape), fmtShape(tb.Stride), tb.StorageOffset, last, storNumel)
		}
	}
	return tb, nil
}

func readEntry(f *zip.File, limit int64) ([]byte, error) {
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("%w: entry %s is %d bytes, limit %d", ErrLimit, f.Name, f.UncompressedSize64, limit)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(io.LimitReader(rc, limit+1))
}

// safetensors-in-DCP items (serialization_format=SAFETENSORS) start with an
// 8-byte little-endian header length followed by '{'.
func looksLikeSafetensors(head []byte) bool {
	return len(head) >= 9 && head[8] == '{' && binary.LittleEndian.Uint64(head) > 1
}
