package ckpt

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/big"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"

	"github.com/ferryml/ferry/internal/corrupt"
)

// Limits for pickles read from checkpoints.
const (
	// MaxMetadataSize is the largest .metadata pickle accepted (1 GiB).
	// A 70B model with 1024 ranks has a few hundred MB of metadata.
	MaxMetadataSize = 1 << 30
	// maxBlobPickleSize is the largest data.pkl inside a torch.save blob.
	maxBlobPickleSize = 16 << 20
)

// pyClass is an inert stand-in for a Python class or function named by a
// GLOBAL/STACK_GLOBAL opcode. Calling it (REDUCE) or instantiating it
// (NEWOBJ) only records the arguments: nothing is ever executed.
type pyClass struct {
	Module, Name string
}

// pyObject is the inert result of calling or instantiating a pyClass.
type pyObject struct {
	Class *pyClass
	Args  []any
	State any // the BUILD state, if any
}

// pyPersistent is a persistent id (BINPERSID) left unresolved.
type pyPersistent struct {
	ID any
}

func (c *pyClass) Call(args ...any) (any, error) {
	return &pyObject{Class: c, Args: args}, nil
}

func (c *pyClass) PyNew(args ...any) (any, error) {
	return &pyObject{Class: c, Args: args}, nil
}

func (o *pyObject) PySetState(state any) error {
	o.State = state
	return nil
}

func (c *pyClass) String() string { return c.Module + "." + c.Name }

// is reports whether the class has the given name and one of the module
// paths. An empty module list matches any module.
func (c *pyClass) is(name string, modules ...string) bool {
	if c == nil || c.Name != name {
		return false
	}
	if len(modules) == 0 {
		return true
	}
	for _, m := range modules {
		if c.Module == m {
			return true
		}
	}
	return false
}

// unpickle decodes a pickle held in memory without executing anything:
// every GLOBAL becomes an inert *pyClass, every call an inert *pyObject,
// persistent ids become *pyPersistent. The bytes are first scanned so that
// no length field can make the decoder allocate more than len(data), and
// any panic inside the decoder is turned into an ErrCorrupt error.
func unpickle(data []byte, name string) (v any, err error) {
	if err := scanPickle(data); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	defer func() {
		if r := recover(); r != nil {
			v = nil
			err = corrupt.New(ErrCorrupt, name, -1, "pickle decoder failed: %v", r)
		}
	}()
	u := pickle.NewUnpickler(bytes.NewReader(data))
	u.FindClass = func(module, n string) (any, error) {
		return &pyClass{Module: module, Name: n}, nil
	}
	u.PersistentLoad = func(id any) (any, error) {
		return &pyPersistent{ID: id}, nil
	}
	u.GetExtension = func(code int) (any, error) {
		return nil, fmt.Errorf("%w: pickle extension code %d", ErrUnsupported, code)
	}
	v, err = u.Load()
	if err != nil {
		return nil, corrupt.New(ErrCorrupt, name, -1, "%v", err)
	}
	return v, nil
}

// pickle opcode argument kinds, for scanPickle.
const (
	argNone  = iota
	argFixed // fixed number of bytes (n)
	argLen   // little-endian length of n bytes, then that many bytes
	argLine  // one newline-terminated line
	argLine2 // two lines (GLOBAL, INST)
	argBad   // unknown opcode
)

type opArg struct {
	kind uint8
	n    uint8
}

var pickleOps = func() [256]opArg {
	var t [256]opArg
	for i := range t {
		t[i] = opArg{kind: argBad}
	}
	for _, c := range []byte("(.012NQRabd}e]lostu)\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98") {
		t[c] = opArg{kind: argNone}
	}
	for c, n := range map[byte]uint8{'J': 4, 'K': 1, 'M': 2, 'h': 1, 'j': 4, 'q': 1, 'r': 4, 'G': 8,
		0x80: 1, 0x82: 1, 0x83: 2, 0x84: 4, 0x95: 8} {
		t[c] = opArg{kind: argFixed, n: n}
	}
	for c, n := range map[byte]uint8{'T': 4, 'U': 1, 'X': 4, 'B': 4, 'C': 1, 0x8a: 1, 0x8b: 4,
		0x8c: 1, 0x8d: 8, 0x8e: 8, 0x96: 8} {
		t[c] = opArg{kind: argLen, n: n}
	}
	for _, c := range []byte("FILPSVgp") {
		t[c] = opArg{kind: argLine}
	}
	t['c'] = opArg{kind: argLine2}
	t['i'] = opArg{kind: argLine2}
	return t
}()

// scanPickle walks the opcodes of a pickle and checks that every argument
// and length-prefixed payload fits in the remaining bytes, and that the
// pickle ends with STOP. It does not interpret anything.
func scanPickle(data []byte) error {
	i := 0
	for i < len(data) {
		op := data[i]
		at := i
		i++
		a := pickleOps[op]
		switch a.kind {
		case argNone:
			if op == '.' {
				return nil
			}
		case argFixed:
			if len(data)-i < int(a.n) {
				return fmt.Errorf("%w: pickle opcode 0x%02x at byte %d: argument past end of data", ErrCorrupt, op, at)
			}
			if op == 0x95 { // FRAME: its length must fit in what follows
				if n := binary.LittleEndian.Uint64(data[i:]); n > uint64(len(data)-i-8) {
					return fmt.Errorf("%w: pickle FRAME at byte %d: length %d past end of data", ErrCorrupt, at, n)
				}
			}
			i += int(a.n)
		case argLen:
			if len(data)-i < int(a.n) {
				return fmt.Errorf("%w: pickle opcode 0x%02x at byte %d: length past end of data", ErrCorrupt, op, at)
			}
			var n uint64
			for k := int(a.n) - 1; k >= 0; k-- {
				n = n<<8 | uint64(data[i+k])
			}
			if a.n == 4 && (op == 0x8b || op == 'T') && int32(uint32(n)) < 0 {
				return fmt.Errorf("%w: pickle opcode 0x%02x at byte %d: negative length", ErrCorrupt, op, at)
			}
			i += int(a.n)
			if n > uint64(len(data)-i) {
				return fmt.Errorf("%w: pickle opcode 0x%02x at byte %d: length %d past end of data", ErrCorrupt, op, at, n)
			}
			if (op == 0x8a || op == 0x8b) && n == 0 {
				// LONG of zero bytes is 0; the decoder we use cannot take it.
				return fmt.Errorf("%w: pickle LONG at byte %d: empty encoding", ErrUnsupported, at)
			}
			i += int(n)
		case argLine, argLine2:
			lines := 1
			if a.kind == argLine2 {
				lines = 2
			}
			for ; lines > 0; lines-- {
				j := bytes.IndexByte(data[i:], '\n')
				if j < 0 {
					return fmt.Errorf("%w: pickle opcode %q at byte %d: unterminated line", ErrCorrupt, op, at)
				}
				i += j + 1
			}
		default:
			return fmt.Errorf("%w: unknown pickle opcode 0x%02x at byte %d", ErrCorrupt, op, at)
		}
	}
	return fmt.Errorf("%w: pickle ends without STOP after %d bytes", ErrCorrupt, len(data))
}

// Helpers that turn decoded pickle values into Go values.

func pyInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int64:
		return x, true
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), true
		}
	}
	return 0, false
}

func pyItems(v any) ([]any, bool) {
	switch x := v.(type) {
	case *types.Tuple:
		return []any(*x), true
	case *types.List:
		return []any(*x), true
	}
	return nil, false
}

// pyDictEntries returns the entries of a dict-like value in insertion order.
func pyDictEntries(v any) ([]types.DictEntry, bool) {
	switch x := v.(type) {
	case *types.Dict:
		return []types.DictEntry(*x), true
	case *types.OrderedDict:
		out := make([]types.DictEntry, 0, x.Len())
		for e := x.List.Front(); e != nil; e = e.Next() {
			oe := e.Value.(*types.OrderedDictEntry)
			out = append(out, types.DictEntry{Key: oe.Key, Value: oe.Value})
		}
		return out, true
	}
	return nil, false
}

// pyAttrs returns the attribute dict of an object built by NEWOBJ+BUILD
// (dataclasses pickle their __dict__ as the BUILD state). A BUILD state of
// (dict, slots) is merged.
func pyAttrs(o *pyObject) map[string]any {
	m := map[string]any{}
	add := func(s any) {
		if es, ok := pyDictEntries(s); ok {
			for _, e := range es {
				if k, ok := e.Key.(string); ok {
					m[k] = e.Value
				}
			}
		}
	}
	if t, ok := o.State.(*types.Tuple); ok && t.Len() == 2 {
		add(t.Get(0))
		add(t.Get(1))
	} else {
		add(o.State)
	}
	return m
}

// pySize decodes torch.Size((a, b, ...)) or a plain tuple/list of ints.
func pySize(v any) ([]int64, bool) {
	if o, ok := v.(*pyObject); ok {
		if !o.Class.is("Size") || len(o.Args) != 1 {
			return nil, false
		}
		v = o.Args[0]
	}
	items, ok := pyItems(v)
	if !ok {
		return nil, false
	}
	out := make([]int64, len(items))
	for i, it := range items {
		n, ok := pyInt(it)
		if !ok {
			return nil, false
		}
		out[i] = n
	}
	return out, true
}
