package tokenize

import "math/bits"

// vocabIndex maps the model's vocabulary keys (raw bytes for a byte-level
// model, the tokens themselves for a character-level one) to ids. It holds
// every id's key (its decoded bytes) in one string, and an open-addressing
// table of 8-byte slots over the ids that are keys, so that it can be
// written to the compiled cache and used from there as it is, without
// hashing 150,000 strings into a Go map at Load (see compiled.go).
// Read-only after Load. The hash is fixed (not seeded per process): the
// table is stored.
type vocabIndex struct {
	keys  string   // every id's key, in id order
	ends  []uint32 // id's key is keys[ends[id]:ends[id+1]]; len(ends) = ids+1
	slots []uint64 // uint64(tag)<<32 | id; 0 = empty; a power of two, at least one empty
	shift uint     // 64 - log2(len(slots))
	n     int      // number of filled slots
}

// vocabHash is a multiply-fold hash of s with a fixed seed.
func vocabHash(s string) uint64 {
	h := uint64(len(s)) ^ 0x243f6a8885a308d3
	for ; len(s) >= 8; s = s[8:] {
		h = mix(h^load64(s, 0), hashK1)
	}
	var w uint64
	for i := len(s) - 1; i >= 0; i-- {
		w = w<<8 | uint64(s[i])
	}
	return mix(h^w^hashK3, hashK2)
}

// newVocabIndex holds keys[id] for every id and indexes those with
// indexed(id); a key repeated among them maps to its last id, as a Go map
// filled in id order would.
func newVocabIndex(keys []string, indexed func(id int) bool) vocabIndex {
	size, count := 0, 0
	for id, k := range keys {
		size += len(k)
		if indexed(id) {
			count++
		}
	}
	arena := make([]byte, 0, size)
	v := vocabIndex{ends: make([]uint32, len(keys)+1)}
	for id, k := range keys {
		arena = append(arena, k...)
		v.ends[id+1] = uint32(len(arena))
	}
	v.keys = string(arena)
	nslots := 1 << max(4, bits.Len(uint(count+count/3))) // load factor at most 3/4
	v.slots = make([]uint64, nslots)
	v.shift = uint(64 - bits.TrailingZeros(uint(nslots)))
	for id := range keys {
		if indexed(id) {
			v.set(int32(id))
		}
	}
	return v
}

// key returns the key of id.
func (v *vocabIndex) key(id uint32) string { return v.keys[v.ends[id]:v.ends[id+1]] }

func (v *vocabIndex) set(id int32) {
	k := v.key(uint32(id))
	h := vocabHash(k)
	tag := uint64(uint32(h)|1) << 32
	mask := uint64(len(v.slots) - 1)
	for i := h >> v.shift; ; i = (i + 1) & mask {
		e := v.slots[i]
		if e == 0 {
			v.slots[i] = tag | uint64(uint32(id))
			v.n++
			return
		}
		if e&^0xffffffff == tag && v.key(uint32(e)) == k {
			v.slots[i] = tag | uint64(uint32(id))
			return
		}
	}
}

// get returns the id of key k.
func (v *vocabIndex) get(k string) (int32, bool) {
	if len(v.slots) == 0 {
		return -1, false
	}
	h := vocabHash(k)
	tag := uint64(uint32(h)|1) << 32
	mask := uint64(len(v.slots) - 1)
	for i := h >> v.shift; ; i = (i + 1) & mask {
		e := v.slots[i]
		if e&^0xffffffff == tag && v.key(uint32(e)) == k {
			return int32(uint32(e)), true
		}
		if e == 0 {
			return -1, false
		}
	}
}

// all calls f with every indexed key and its id, in slot order, until f
// returns false.
func (v *vocabIndex) all(f func(k string, id int32) bool) {
	for _, e := range v.slots {
		if e != 0 && !f(v.key(uint32(e)), int32(uint32(e))) {
			return
		}
	}
}
