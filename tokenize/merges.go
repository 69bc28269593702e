package tokenize

import (
	"math/bits"
	"slices"

	"github.com/ferryml/ferry/tokenize/internal/le"
)

// mergeTable maps a pair of token ids to its merge: rank<<32 | merged id.
// It is an open-addressing table of 16-byte slots with linear probing, built
// once at Load and read-only after: one multiply and usually one cache line
// per lookup, where a Go map costs several times the instructions on the
// BPE step's hot path (every pair of every word not yet cached).
type mergeTable struct {
	// slots are pairs of words: key (pairKey | mergeUsed; 0 = empty), val.
	// A flat []uint64, so that the compiled cache can hold it as it is.
	slots []uint64
	shift uint    // 64 - log2(len(slots)/2)
	mem   *le.Mem // owns slots when they are huge pages (le.HugeUint64s)
}

// mergeUsed marks a filled slot: pairKey of two non-negative int32 ids
// never sets bit 63.
const mergeUsed = 1 << 63

func newMergeTable(n int) mergeTable {
	size := 1 << max(4, bits.Len(uint(n+n/3))) // load factor at most 3/4
	slots, mem := le.HugeUint64s(2 * size)
	return mergeTable{slots: slots, shift: uint(64 - bits.TrailingZeros(uint(size))), mem: mem}
}

// mergeMul hashes a merges key: the top bits of key*mergeMul are its table
// slot (index) and, three bits longer, its filter bit (mergeFilter.index).
const mergeMul = 0x9e3779b97f4a7c15

func (t *mergeTable) index(key uint64) uint64 {
	return (key * mergeMul) >> t.shift
}

// set maps key to val; a key already present takes the new val (the last
// of a repeated pair wins, as in HF tokenizers' merges map).
func (t *mergeTable) set(key, val uint64) {
	key |= mergeUsed
	mask := uint64(len(t.slots)/2 - 1)
	for i := t.index(key); ; i = (i + 1) & mask {
		s := t.slots[2*i : 2*i+2 : 2*i+2]
		if s[0] == 0 || s[0] == key {
			s[0], s[1] = key, val
			return
		}
	}
}

// mergeFilter is a one-hash Bloom filter of a mergeTable's keys, 8 bits a
// slot (1/4 MiB for Qwen2.5's merges, 1/2 MiB for Llama-3.1's): a pair
// whose bit is clear has no merge, without a probe of the table (megabytes,
// past the CPU's L2). Of a cold pass's pair lookups past mergeTiny's cache,
// ~40% find no merge; ~6-7% of absent pairs find their bit set. The zero
// mergeFilter (none built yet) may have every key.
type mergeFilter struct {
	bits  []uint64
	shift uint
}

func newMergeFilter(t *mergeTable) mergeFilter {
	f := mergeFilter{bits: make([]uint64, len(t.slots)/2*8/64), shift: t.shift - 3}
	for i := 0; i < len(t.slots); i += 2 {
		if k := t.slots[i]; k != 0 {
			h := f.index(k)
			f.bits[h/64] |= 1 << (h % 64)
		}
	}
	return f
}

// index is key's bit (key with mergeUsed, as in the table's slots).
func (f *mergeFilter) index(key uint64) uint64 {
	return (key * mergeMul) >> f.shift
}

// mayHave reports whether key (with mergeUsed) may be in the table.
func (f *mergeFilter) mayHave(key uint64) bool {
	if len(f.bits) == 0 {
		return true
	}
	h := f.index(key)
	return f.bits[h/64]&(1<<(h%64)) != 0
}

func (t *mergeTable) get(key uint64) (uint64, bool) {
	key |= mergeUsed
	mask := uint64(len(t.slots)/2 - 1)
	for i := t.index(key); ; i = (i + 1) & mask {
		s := t.slots[2*i : 2*i+2 : 2*i+2]
		if s[0] == key {
			return s[1], true
		}
		if s[0] == 0 {
			return 0, false
		}
	}
}

// buildBytePairs fills m.bytePairs for a byte-level model: the merge of
// every pair of single bytes, looked up once. Most pairs of a new word's first
// round are pairs of bytes, and this 512 KiB table stays in the CPU's caches
// where the merges table (megabytes) does not.
func (m *bpeModel) buildBytePairs() {
	m.bytePairs = nil
	if m.charLevel || slices.Contains(m.byteID[:], -1) {
		return // a byte without an id becomes unk, or nothing: see initial
	}
	m.bytePairs = make([]uint64, 1<<16)
	for x := range 256 {
		for y := range 256 {
			v := uint64(noRank) << 32
			if w, ok := m.merges.get(pairKey(m.byteID[x], m.byteID[y])); ok {
				v = w
			}
			m.bytePairs[x<<8|y] = v
		}
	}
}
