package tokenize

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/ferryml/ferry/tokenize/internal/le"
)

// mergeTable maps a pair of token ids to its merge: an order (compared as
// the merges' ranks are) and the merged id. It is an open-addressing table
// of 8-byte slots with linear probing, built once at Load and read-only
// after: one multiply and usually one cache line per lookup, where a Go map
// costs several times the instructions on the BPE step's hot path (every
// pair of every word not yet cached). Its probes are at random over
// megabytes, mostly past the CPU's L2, so its size counts: with four times
// the slots (16 MiB for Qwen2.5) a cold pass over the 52K Alpaca prompts
// read 6% slower, and with slots of 8 bytes, where they were 16 (2 MiB for
// Qwen2.5's merges, 4 MiB for Llama-3.1's), 4.3% faster for both (medians
// of 20 alternating fresh processes).
type mergeTable struct {
	// slots hold mergeUsed | (left<<idBits | right)<<valBits | val, 0 for
	// an empty slot. val is the merge's order, which gives its merged id:
	//   - merged<<placeBits | place, where the merged ids never decrease
	//     along the ranks (every byte-level family here): place counts the
	//     merges of the same merged id before it; side is nil;
	//   - otherwise its index among the merges in rank order, and
	//     side[val] is its merged id.
	// A flat []uint64, so that the compiled cache can hold it as it is.
	slots     []uint64
	shift     uint   // 64 - log2(len(slots))
	idBits    uint   // bits of every id in the table
	valBits   uint   // 63 - 2*idBits
	valMask   uint64 // 1<<valBits - 1
	placeBits uint
	side      []uint32
	mem       *le.Mem // owns slots when they are huge pages (le.Huge)
}

// mergeUsed marks a filled slot.
const mergeUsed = 1 << 63

// maxMergeIDBits bounds a mergeTable's ids: 2^21 ids (eight times Gemma
// 3's vocabulary of 262,144) leave 21 bits for val.
const maxMergeIDBits = 21

// mergeKV is a merge as buildMerges reads it: pairKey of its pair and its
// merged id. Its rank is its index in the file.
type mergeKV struct {
	key    uint64
	merged int32
}

// newMergeTable returns the table of merges kvs, in rank order, of a model
// whose ids go up to maxID; of a pair repeated, the last merge counts, as in
// HF tokenizers' merges map. It fails when the ids need more than
// maxMergeIDBits bits, or the merges more than the bits left for val.
func newMergeTable(kvs []mergeKV, maxID int32) (mergeTable, error) {
	var t mergeTable
	t.setBits(uint(bits.Len32(uint32(max(maxID, 1)))), 0)
	if t.idBits > maxMergeIDBits {
		return t, fmt.Errorf("ids up to %d: more than %d bits", maxID, maxMergeIDBits)
	}
	vb := t.valBits
	if bits.Len(uint(len(kvs))) > int(vb) {
		return t, fmt.Errorf("%d merges of ids of %d bits: more than the %d bits left", len(kvs), t.idBits, vb)
	}
	size := 1 << max(4, bits.Len(uint(len(kvs)+len(kvs)/3))) // load factor at most 3/4
	t.slots, t.mem = le.Huge[uint64](size)
	t.shift = uint(64 - bits.TrailingZeros(uint(size)))
	// First val is the index in kvs, so that a repeated pair's last merge
	// takes its slot; then the merges left, in rank order, get their order.
	for i, e := range kvs {
		t.put(e.key, uint64(i))
	}
	alive := make([]bool, len(kvs))
	for _, s := range t.slots {
		if s != 0 {
			alive[s&t.valMask] = true
		}
	}
	vals := make([]uint64, len(kvs))
	monotone, place, maxPlace, prev := true, 0, 0, int32(-1)
	for i, e := range kvs {
		if !alive[i] {
			continue
		}
		switch {
		case e.merged < prev:
			monotone = false
		case e.merged == prev:
			place++
			maxPlace = max(maxPlace, place)
		default:
			place = 0
		}
		prev = e.merged
		vals[i] = uint64(place)
	}
	t.setBits(t.idBits, uint(bits.Len(uint(maxPlace))))
	if monotone && t.idBits+t.placeBits <= min(vb, 31) {
		for i, e := range kvs {
			vals[i] |= uint64(e.merged) << t.placeBits
		}
	} else {
		t.setBits(t.idBits, 0)
		for i, e := range kvs {
			if alive[i] {
				vals[i] = uint64(len(t.side))
				t.side = append(t.side, uint32(e.merged))
			}
		}
	}
	for i, s := range t.slots {
		if s != 0 {
			t.slots[i] = s&^t.valMask | vals[s&t.valMask]
		}
	}
	return t, nil
}

// setBits sets the table's bits: its ids', its vals' (the rest) and its
// places' (see slots).
func (t *mergeTable) setBits(idBits, placeBits uint) {
	t.idBits, t.placeBits = idBits, placeBits
	t.valBits = 63 - 2*idBits
	t.valMask = 1<<t.valBits - 1
}

// slotKey is the bits of a slot that hold pairKey key (without mergeUsed).
func (t *mergeTable) slotKey(key uint64) uint64 {
	return mergeUsed | (key>>32<<t.idBits|key&0xffffffff)<<t.valBits
}

// pairOf is the pairKey (with mergeUsed) of a filled slot s.
func (t *mergeTable) pairOf(s uint64) uint64 {
	ab := s &^ mergeUsed >> t.valBits
	return mergeUsed | ab>>t.idBits<<32 | ab&(1<<t.idBits-1)
}

// mergeMul hashes a merges key: the top bits of key*mergeMul are its table
// slot (index) and, three bits longer, its filter bit (mergeFilter.index).
const mergeMul = 0x9e3779b97f4a7c15

// index is the home slot of key (pairKey | mergeUsed).
func (t *mergeTable) index(key uint64) uint64 {
	return (key * mergeMul) >> t.shift
}

// put sets the val of key (pairKey, its ids of the table's bits): a key
// already present takes the new val.
func (t *mergeTable) put(key, val uint64) {
	sk := t.slotKey(key)
	mask := uint64(len(t.slots) - 1)
	for i := t.index(key | mergeUsed); ; i = (i + 1) & mask {
		if s := t.slots[i]; s == 0 || s&^t.valMask == sk {
			t.slots[i] = sk | val
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
	f := mergeFilter{bits: writtenPages(make([]uint64, len(t.slots)*8/64), pageSize/8), shift: t.shift - 3}
	for _, s := range t.slots {
		if s != 0 {
			h := f.index(t.pairOf(s))
			f.bits[h/64] |= 1 << (h % 64)
		}
	}
	return f
}

// index is key's bit (key with mergeUsed, as in the table's slots).
func (f *mergeFilter) index(key uint64) uint64 {
	return (key * mergeMul) >> (f.shift & 63)
}

// mayHave reports whether key (with mergeUsed) may be in the table.
func (f *mergeFilter) mayHave(key uint64) bool {
	if len(f.bits) == 0 {
		return true
	}
	h := f.index(key)
	return f.bits[h/64]&(1<<(h%64)) != 0
}

// get returns the merge of key (pairKey of two ids of the model, each of
// idBits bits at most): order<<32 | merged id.
func (t *mergeTable) get(key uint64) (uint64, bool) {
	v, ok := t.find(key)
	return t.val(v), ok
}

// find returns the val of key's slot (see get). Small enough to inline.
func (t *mergeTable) find(key uint64) (uint64, bool) {
	sk := t.slotKey(key)
	for i := t.index(key | mergeUsed); ; i = (i + 1) & uint64(len(t.slots)-1) {
		s := t.slots[i]
		if s&^t.valMask == sk {
			return s & t.valMask, true
		}
		if s == 0 {
			return 0, false
		}
	}
}

// val is get's result for the val v of a slot: order<<32 | merged id.
func (t *mergeTable) val(v uint64) uint64 {
	if t.side == nil {
		return v<<32 | v>>(t.placeBits&63)
	}
	return t.sideVal(v)
}

// sideVal is val where the merged ids are aside.
//
//go:noinline
func (t *mergeTable) sideVal(v uint64) uint64 { return v<<32 | uint64(t.side[v]) }

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
