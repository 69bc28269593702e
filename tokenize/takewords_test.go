package tokenize

import (
	"slices"
	"strings"
	"testing"
)

// checkTakeWords runs takeWords (assembly on amd64) and takeWordsGo on the
// same blocks and fails when they differ in what they take: from pos, with
// takeArgs' arguments for blocks (the starts and unknowns of pos's block and
// those after it).
func checkTakeWords(t *testing.T, words *wordTable, text string, pos, end int, blocks [][2]uint64) (int, uint64, int, int) {
	t.Helper()
	base := pos &^ 63
	m, u, run, last := takeArgs(pos, end, blocks)
	out, outGo := make([]int32, 64*(len(run)+1)), make([]int32, 64*(len(run)+1))
	p, mm, mb, j := takeWords(words, text, base, pos, m, u, run, last, out)
	pGo, mGo, mbGo, jGo := takeWordsGo(words, text, base, pos, m, u, run, last, outGo)
	if p != pGo || mm != mGo || mb != mbGo || j != jGo || !slices.Equal(out[:j], outGo[:jGo]) {
		t.Fatalf("text %q pos %d m %#x u %#x run %#x last %#x: takeWords %d %#x %d %v, takeWordsGo %d %#x %d %v", text, pos, m, u, run, last, p, mm, mb, out[:j], pGo, mGo, mbGo, outGo[:jGo])
	}
	return p, mm, mb, j
}

// takeArgs returns takeWords' arguments from pos as appendBlocks gives
// them, for blocks (the starts and unknowns of pos's block, then of those
// after it) and end, the last start from which a key may be read: m, the
// starts of pos's block above pos before its first unknown, and u, its
// unknowns above pos; and when u is 0 the blocks after it, up to the one
// that holds end, whose starts last masks to end.
func takeArgs(pos, end int, blocks [][2]uint64) (m, u uint64, run [][2]uint64, last uint64) {
	base := pos &^ 63
	above := ^uint64(0) << (pos & 63) << 1
	u = blocks[0][1] & above
	m = blocks[0][0] & above & (u&-u - 1)
	last = ^uint64(0)
	lim := end - base // the last start that may be read, from base
	if lim < 63 {
		if pos-base > lim {
			m = 0
		}
		return m & (2<<max(lim, 0) - 1), u, nil, last
	}
	if u == 0 {
		n := min(len(blocks)-1, lim>>6)
		run = blocks[1 : 1+n]
		if n == lim>>6 {
			last = 2<<(lim&63) - 1
		}
	}
	return m, u, run, last
}

// takeEnds are the last starts appendBlocks may give takeWords for text:
// 16 bytes before its end, and where takeWords reads past the text
// (readsPast), its end.
func takeEnds(text string) []int {
	if readsPast {
		return []int{len(text) - 16, len(text)}
	}
	return []int{len(text) - 16}
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
			// The 16 bytes after the text, which the loops may read when
			// given its end as the last start (overreads), are not zero.
			text = (text + strings.Repeat("\xff", 16))[:len(text)]
			// The pre-token starts of the whole text, as bits per block.
			blocks := make([][2]uint64, (len(text)+63)/64)
			for p := 0; p < len(text); {
				p += scan(scanLlama3, text[p:])
				if p < len(text) {
					blocks[p/64][0] |= 1 << (p % 64)
				}
			}
			if len(text)%64 != 0 { // the text's end, as the block scanner marks it
				blocks[len(text)/64][0] |= 1 << (len(text) % 64)
			}
			// From each start (and each block's first byte), as appendBlocks
			// calls it after a pre-token it did not take, with the blocks
			// after and without, with an unknown after pos, and with the
			// last start 16 bytes before the text's end and at its end.
			for base := 0; base < len(text); base += 64 {
				b := base / 64
				for pos := base; pos < base+64 && pos < len(text); pos++ {
					if pos != base && blocks[b][0]>>(pos%64)&1 == 0 {
						continue
					}
					unknown := [2]uint64{blocks[b][0], blocks[b][1] | 1<<63}
					for _, bl := range [][][2]uint64{blocks[b : b+1], blocks[b:min(b+2, len(blocks))], blocks[b:], {unknown}} {
						for _, end := range takeEnds(text) {
							if pos > end {
								continue
							}
							_, _, _, j := checkTakeWords(t, words, text, pos, end, bl)
							calls++
							if j > 0 {
								took++
							}
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
	_, m, _, j := checkTakeWords(t, &w, text, 0, len(text)-16, [][2]uint64{{1<<2 | 1<<4 | 1<<6}})
	if j != 3 || m != 0 {
		t.Fatalf("took %d (m %#x), want 3", j, m)
	}
	// A word in neither slot ends the loop there.
	_, m, _, j = checkTakeWords(t, &w, "zz"+text, 0, len(text)-16, [][2]uint64{{1<<2 | 1<<4}})
	if j != 0 || m != 1<<2|1<<4 {
		t.Fatalf("took %d (m %#x), want none", j, m)
	}
	// A word of more than shortWord bytes is taken from its home slot in
	// the table's long part; one not there ends the loop.
	long := strings.Repeat("q", shortWord+1)
	w.insert(long, 11)
	text = homeLast[0] + long + homeLast[0] + strings.Repeat(" ", 20)
	_, m, _, j = checkTakeWords(t, &w, text, 0, len(text)-16, [][2]uint64{{1<<2 | 1<<(shortWord+3) | 1<<(shortWord+5)}})
	if j != 3 || m != 0 {
		t.Fatalf("took %d (m %#x), want 3", j, m)
	}
	text = homeLast[0] + strings.Repeat("r", shortWord+1) + homeLast[0] + strings.Repeat(" ", 20)
	_, m, _, j = checkTakeWords(t, &w, text, 0, len(text)-16, [][2]uint64{{1<<2 | 1<<(shortWord+3) | 1<<(shortWord+5)}})
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
// from any blocks, starts, unknowns and position, into the blocks after too.
func FuzzTakeWords(f *testing.F) {
	f.Add("Below is an instruction that describes a task. Write a response that appropriately completes the request.", uint64(0x1122334455667788), uint64(0), uint64(0x8040201008040201), uint64(0), uint64(0x0101010101010101), uint64(1<<40), uint8(0), uint8(3))
	f.Add(" the the the the the the the the the the the the the the the the the the the the the", uint64(0x8888888888888888), uint64(0), uint64(0x1111111111111111), uint64(0), uint64(0x2222222222222222), uint64(0), uint8(3), uint8(2))
	f.Add("x", uint64(1<<63|1<<17), uint64(1<<20), uint64(0), uint64(0), uint64(0), uint64(0), uint8(16), uint8(1))
	f.Add("x", uint64(0), uint64(0), uint64(1<<2|1<<9), uint64(0), uint64(1<<3), uint64(0), uint8(60), uint8(3))
	f.Fuzz(func(t *testing.T, text string, m, u, s1, u1, s2, u2 uint64, pos, n uint8) {
		for len(text) < 300 {
			text += " a" + text
		}
		// The loops may read 16 bytes past the last start given: past the
		// end of the text, in the longer string, when end is its end.
		text = (text + strings.Repeat("\xfe", 16))[:len(text)]
		blocks := [][2]uint64{{m, u}, {s1, u1}, {s2, u2}, {s1, u2}}[:1+n%4]
		for _, model := range models {
			words := &loadModel(t, model).model.tables().words
			for _, base := range []int{0, 64, len(text) &^ 63, (len(text) - 40) &^ 63} {
				p := base + int(pos%64)
				for _, end := range takeEnds(text) {
					if p <= end {
						checkTakeWords(t, words, text, p, end, blocks)
					}
				}
			}
		}
	})
}
