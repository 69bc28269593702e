package corrupt_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ferryml/ferry/internal/corrupt"
	"github.com/ferryml/ferry/tokenize"
)

var errKind = errors.New("x: corrupt")

func TestError(t *testing.T) {
	err := fmt.Errorf("reading: %w", corrupt.New(errKind, "a.bin", 12, "length %d past the end", 99))
	if got, want := err.Error(), "reading: x: corrupt: a.bin: byte 12: length 99 past the end"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	var ce *corrupt.Error
	if !errors.Is(err, errKind) || !errors.As(err, &ce) || ce.Path != "a.bin" || ce.Offset != 12 {
		t.Errorf("errors.Is/As: %+v", ce)
	}
	if got := corrupt.New(errKind, "a.bin", -1, "bad").Error(); got != "x: corrupt: a.bin: bad" {
		t.Errorf("no offset: %q", got)
	}
}

// TestTokenizeForm: tokenize's own form (it imports nothing of ferry) has
// the same fields and writes the same message.
func TestTokenizeForm(t *testing.T) {
	for _, off := range []int64{-1, 0, 77} {
		a := &corrupt.Error{Kind: tokenize.ErrCorrupt, Path: "model.vocab", Offset: off, What: "id 3 twice"}
		b := &tokenize.CorruptError{Kind: tokenize.ErrCorrupt, Path: "model.vocab", Offset: off, What: "id 3 twice"}
		if a.Error() != b.Error() {
			t.Errorf("offset %d: %q vs %q", off, a.Error(), b.Error())
		}
		if !errors.Is(b, tokenize.ErrCorrupt) {
			t.Error("tokenize.CorruptError does not match its Kind")
		}
	}
}
