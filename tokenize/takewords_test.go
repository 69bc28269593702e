package tokenize

import (
	"math/bits"
	"slices"
	"strings"
	"testing"
)

// checkTakeWords runs takeWords (assembly on amd64) and takeWordsGo on the
// same blocks and fails when they differ in what they take. m and next are
// starts in pos's block and the next; with none in pos's, next's are given
// as m, as appendBlocks does.
func checkTakeWords(t *testing.T, words *wordTable, text string, pos int, m, next uint64) (int, uint64, int, int) {
	t.Helper()
	base := pos &^ 63
	if m == 0 && next != 0 {
		m, next, base = next, 0, base+64
	}
	var out, outGo [128]int32
	p, mm, mb, j := takeWords(words, text, base, pos, m, next, &out)
	pGo, mGo, mbGo, jGo := takeWordsGo(words, text, base, pos, m, next, &outGo)
	if p != pGo || mm != mGo || mb != mbGo || j != jGo || !slices.Equal(out[:j], outGo[:jGo]) {
		t.Fatalf("text %q pos %d m %#x next %#x: takeWords %d %#x %d %v, takeWordsGo %d %#x %d %v", text, pos, m, next, p, mm, mb, out[:j], pGo, mGo, mbGo, outGo[:jGo])
	}
	return p, mm, mb, j
}

// takeStarts returns the starts that takeWords may be given from pos: the
// bits of m (starts in pos's block) above pos, then those of next (starts
// in the block after), each (but the last) 16 bytes from text's end at
// least, as appendBlocks limits them.
func takeStarts(text string, pos int, m, next uint64) (uint64, uint64) {
	base := pos &^ 63
	m &= ^uint64(0) << (pos & 63) << 1
	lim := len(text) - 16 - base // the last start that may be read from
	for k := m; k != 0; k &= k - 1 {
		if i := bits.TrailingZeros64(k); i > lim {
			return m & (2<<i - 1), 0 // the first start past lim is the last one
		}
	}
	for k := next; k != 0; k &= k - 1 {
		if i := bits.TrailingZeros64(k); 64+i > lim {
			return m, next & (2<<i - 1)
		}
	}
	return m, next
}

// TestTakeWords: on the real corpus's pre-tokens, with the starts the block
// scanner finds, the two loops take the same words (and most calls some).
func TestTakeWords(t *testing.T) {
	for _, model := range models {
		tok := loadModel(t, model)
		words := &tok.model.tables().words
		calls, took := 0, 0 // took: calls that took a word at least
		for i, text := range corpusTexts(t) {
			if i%corpusStep(3, 24) != 0 || len(text) < 16 {
				continue
			}
			// The pre-token starts of the whole text, as bits per block.
			starts := make([]uint64, len(text)/64+2)
			for p := 0; p < len(text); {
				p += scan(scanLlama3, text[p:])
				if p < len(text) {
					starts[p/64] |= 1 << (p % 64)
				}
			}
			// From each start (and each block's first byte), as appendBlocks
			// calls it after a pre-token it did not take, with the next
			// block's starts and without.
			for base := 0; base+16 <= len(text); base += 64 {
				for pos := base; pos < base+64 && pos+16 <= len(text); pos++ {
					if pos != base && starts[base/64]>>(pos%64)&1 == 0 {
						continue
					}
					for _, next := range []uint64{0, starts[base/64+1]} {
						m, next := takeStarts(text, pos, starts[base/64], next)
						if m|next == 0 {
							continue
						}
						_, _, _, j := checkTakeWords(t, words, text, pos, m, next)
						calls++
						if j > 0 {
							took++
						}
					}
				}
			}
		}
		if took < calls/2 {
			t.Errorf("%s: %d of %d calls took a word", model, took, calls)
		}
		t.Logf("%s: %d of %d calls took a word", model, took, calls)
	}
}

// TestTakeWordsNear: a word displaced to the slot after its home, also past
// the table's last slot (the probe wraps to the first), is taken.
func TestTakeWordsNear(t *testing.T) {
	w := newWordTable(4, 0) // 16 slots
	last := uint64(len(w.slots)/2 - 1)
	// Two words whose home is the last slot: the second goes to slot 0.
	var homeLast []string
	for c := 0; c < 1<<16 && len(homeLast) < 2; c++ {
		k := string([]byte{byte(c), byte(c >> 8)})
		a, b := keyOf(k)
		if shortIndex(a, wordTag(b, 2))>>w.shift == last {
			homeLast = append(homeLast, k)
		}
	}
	if len(homeLast) < 2 {
		t.Fatal("no two words with the last slot as home")
	}
	w.insert(homeLast[0], 7)
	w.insert(homeLast[1], 9)
	if a, b := keyOf(homeLast[1]); w.slots[0] != a || w.slots[1] != wordTag(b, 2)|9<<40 {
		t.Fatalf("%q is not in slot 0", homeLast[1])
	}
	text := homeLast[1] + homeLast[0] + homeLast[1] + strings.Repeat(" ", 20)
	_, m, _, j := checkTakeWords(t, &w, text, 0, 1<<2|1<<4|1<<6, 0)
	if j != 3 || m != 0 {
		t.Fatalf("took %d (m %#x), want 3", j, m)
	}
	// A word in neither slot ends the loop there.
	_, m, _, j = checkTakeWords(t, &w, "zz"+text, 0, 1<<2|1<<4, 0)
	if j != 0 || m != 1<<2|1<<4 {
		t.Fatalf("took %d (m %#x), want none", j, m)
	}
	// A word of more than shortWord bytes is taken from its home slot in
	// the table's long part; one not there ends the loop.
	long := strings.Repeat("q", shortWord+1)
	w.insert(long, 11)
	text = homeLast[0] + long + homeLast[0] + strings.Repeat(" ", 20)
	_, m, _, j = checkTakeWords(t, &w, text, 0, 1<<2|1<<(shortWord+3)|1<<(shortWord+5), 0)
	if j != 3 || m != 0 {
		t.Fatalf("took %d (m %#x), want 3", j, m)
	}
	text = homeLast[0] + strings.Repeat("r", shortWord+1) + homeLast[0] + strings.Repeat(" ", 20)
	_, m, _, j = checkTakeWords(t, &w, text, 0, 1<<2|1<<(shortWord+3)|1<<(shortWord+5), 0)
	if j != 1 || m != 1<<(shortWord+3)|1<<(shortWord+5) {
		t.Fatalf("took %d (m %#x), want 1", j, m)
	}
	a, b := keyOf(long)
	if id, ok := w.find(a, b, len(long)); !ok || id != 11 {
		t.Fatalf("find %q: %d %v, want 11", long, id, ok)
	}
	if _, ok := w.home(a, b, len(long)); ok {
		t.Fatalf("home found %q, of more than shortWord bytes", long)
	}
}

// FuzzTakeWords: the assembly loop and takeWordsGo take the same words
// from any block, starts and position, into the next block too.
func FuzzTakeWords(f *testing.F) {
	f.Add("Below is an instruction that describes a task. Write a response that appropriately completes the request.", uint64(0x1122334455667788), uint64(0x8040201008040201), uint8(0))
	f.Add(" the the the the the the the the the the the the the the the the the the the the the", uint64(0x8888888888888888), uint64(0x1111111111111111), uint8(3))
	f.Add("x", uint64(1<<63|1<<17), uint64(0), uint8(16))
	f.Add("x", uint64(0), uint64(1<<2|1<<9), uint8(60))
	f.Fuzz(func(t *testing.T, text string, m, next uint64, pos uint8) {
		for len(text) < 160 {
			text += " a" + text
		}
		for _, model := range models {
			words := &loadModel(t, model).model.tables().words
			for _, base := range []int{0, 64} {
				p := base + int(pos%64)
				if p+16 > len(text) {
					continue
				}
				m, next := takeStarts(text, p, m, next)
				checkTakeWords(t, words, text, p, m, next)
			}
		}
	})
}
