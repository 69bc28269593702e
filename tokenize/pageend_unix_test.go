//go:build unix

package tokenize

import (
	"syscall"
	"testing"

	"github.com/ferryml/ferry/tokenize/internal/bytestr"
)

// TestAppendBlocksPageEnd: a text that ends at a page's end, or up to 16
// bytes before it, with a page after it that cannot be read (a read faults),
// gets the ids of scan's pre-tokens: the inner loop reads past a text's end
// only within its last byte's page (overreads), and it does so where 15
// bytes are left in it.
func TestAppendBlocksPageEnd(t *testing.T) {
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Munmap(mem)
	if err := syscall.Mprotect(mem[page:], syscall.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	prompts := alpacaPrompts(t, "")
	texts := append([]string{}, blockScanSeeds...)
	for n := 1; n <= 200; n += 7 {
		texts = append(texts, prompts[1][:min(n, len(prompts[1]))])
	}
	texts = append(texts, prompts[2:12]...)
	for _, m := range blockFamilies {
		tok := loadModel(t, m)
		for _, s := range texts {
			if s == "" || len(s) > page-16 {
				continue
			}
			for gap := range 17 { // bytes between the text's end and the page's
				off := page - gap - len(s)
				copy(mem[off:], s)
				in := bytestr.String(mem[off : off+len(s)]) // shares mem (a copy under purego, which reads no further)
				if got, want := overreads(in), readsPast && gap >= 15; got != want {
					t.Fatalf("%d bytes before the page's end: overreads %v, want %v", gap, got, want)
				}
				checkAppendBlocks(t, tok, in)
			}
		}
	}
}
