// Package corrupt is ferry's one corruption error: input that breaks its
// format, named by where it is and what is wrong, as pebble's
// base.CorruptionErrorf and arrow's offset messages do. shard, ckpt and
// serve return it; tokenize, which imports nothing of ferry, has its own
// form with the same fields and the same message, tokenize.CorruptError
// (a test here holds the two alike).
//
// The message is always in this order:
//
//	KIND: PATH: byte OFFSET: WHAT
//	shard: corrupt: rank-00000-of-00002.arrow: byte 4096: batch 3: ...
//	ckpt: corrupt checkpoint: ckpt/__0_0.distcp: byte 812: item "w": ...
//
// KIND is the package's sentinel (shard.ErrCorrupt, ckpt.ErrCorrupt ...),
// which errors.Is matches; ": byte OFFSET" is left out when the offset is
// not known. errors.As(err, &*corrupt.Error) gives the fields.
package corrupt

import (
	"fmt"
	"strconv"
)

// Error is a corruption error.
type Error struct {
	Kind   error  // the package's sentinel: errors.Is(err, Kind)
	Path   string // the file, object or document path
	Offset int64  // byte offset of the fault in Path; -1 when not known
	What   string // what is wrong: what was expected, what was found
}

// New returns an *Error of kind at path and byte off (-1: not known), what
// formatted from format and args.
func New(kind error, path string, off int64, format string, args ...any) error {
	return &Error{Kind: kind, Path: path, Offset: off, What: fmt.Sprintf(format, args...)}
}

func (e *Error) Error() string {
	s := e.Kind.Error() + ": " + e.Path
	if e.Offset >= 0 {
		s += ": byte " + strconv.FormatInt(e.Offset, 10)
	}
	return s + ": " + e.What
}

// Unwrap returns Kind.
func (e *Error) Unwrap() error { return e.Kind }
