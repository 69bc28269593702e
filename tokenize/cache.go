package tokenize

import (
	"hash/maphash"
	"math/bits"
	"runtime"

	"github.com/ferryml/ferry/tokenize/internal/le"
)

// ptCache maps pre-tokens (at most maxCachedLen bytes) to their ids. It is
// an open-addressing table specialised for short keys: a dense array of
// slots with up to three ids inline, longer keys and more ids in arenas. It
// is not safe for concurrent use: each goroutine gets its own in a state
// (see statePool).
type ptCache struct {
	// hot is a direct-mapped front table of short keys with one id, sized
	// to stay in the CPU's L2 cache (1.5 MiB), where slots does not once it
	// holds tens of thousands of pre-tokens: the frequent pre-tokens of text
	// (Zipf) are found without a trip to memory. Its entries stay right
	// after slots is cleared (a key's ids never change). Made on first use:
	// a byte-level model's words go to its word table instead (see
	// wordTable), which has them before they are first seen.
	hot   []hotSlot
	slots []ptSlot
	mem   *le.Mem // owns slots when they are huge pages (newSlots)
	keys  []byte  // bytes of the keys longer than 16 bytes
	ids   []int32 // ids of the entries with more than three
	count int
	seed  uint64
}

// ptSlot is one entry, 32 bytes (two to a cache line). Keys of up to 16
// bytes are identified exactly by their length and the two words a, b that
// hash reads from them, so they are compared without touching the key bytes;
// for a longer key, a is its offset in keys and b its hash. Up to three ids
// are in the slot itself, so that a cached word found costs one cache line
// (of the 80K pre-tokens a cold pass over the 52K Alpaca prompts finds in
// the cache, 68K have 2 ids and 11K 3); more are in ids, from ids[0].
type ptSlot struct {
	a, b uint64
	ids  [3]int32
	klen uint8 // len(key); 0 = empty slot
	n    uint8 // number of ids
}

// hotSlot is an entry of ptCache.hot: a key of up to 16 bytes, identified
// by its length and the words a, b of hash, and its id.
type hotSlot struct {
	a, b uint64
	klen uint32 // len(key)+1; 0 = empty
	id   int32
}

const hotSlots = 1 << 16

const (
	// maxCachedLen is the longest pre-token (in bytes) kept in the cache (HF
	// caches words of up to 256 characters).
	maxCachedLen = 255
	// maxCacheEntries bounds each cache: 32-byte slots at a load factor of
	// at most 3/4 (16 MiB when full), plus the ids and long keys; a full
	// cache starts over empty. The 52K Alpaca prompts have ~72K distinct
	// pre-tokens: with 1<<16, a second pass over them found none cached.
	maxCacheEntries = 1 << 18
	minCacheSlots   = 1 << 12
)

var cacheSeed = uint64(new(maphash.Hash).Sum64()) | 1

func newPTCache() *ptCache {
	c := &ptCache{seed: cacheSeed}
	c.reset(minCacheSlots)
	return c
}

func (c *ptCache) reset(slots int) {
	c.slots, c.mem = newSlots(slots)
	c.keys = c.keys[:0]
	c.ids = c.ids[:0]
	c.count = 0
}

// load64 reads 8 little-endian bytes of s at i (the compiler merges the loads).
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

const (
	hashK1 = 0xa0761d6478bd642f
	hashK2 = 0xe7037ed1a0b428db
	hashK3 = 0x8ebc6af09c88c6e3
)

// hash is a wyhash-style hash of a short string; a and b are the words it
// read, which identify keys of up to 16 bytes: the key's bytes in little-
// endian order, zero-padded (so a key is identified by a, b and its length).
func (c *ptCache) hash(p string) (h, a, b uint64) {
	n := len(p)
	if n > 16 {
		h := c.seed
		i := 0
		for ; i+16 < n; i += 16 {
			h = mix(load64(p, i)^hashK1, load64(p, i+8)^h)
		}
		a, b = load64(p, n-16)^h, load64(p, n-8)
		return c.finish(a, b, n), a, b
	}
	a, b = keyOf(p)
	return c.finish(a, b, n), a, b
}

// shortKey is the a, b of hash(p) for a key p of n <= 16 bytes from w0, w1,
// the two little-endian words at p's start (read past its end): masked,
// without branching on n (the lengths of successive pre-tokens are not
// predictable).
func shortKey(w0, w1 uint64, n int) (a, b uint64) {
	m := &shortMasks[n&31]
	return w0 & m[0], w1 & m[1]
}

// shortMasks[n] keeps the first n bytes of two little-endian words.
var shortMasks = func() (m [32][2]uint64) {
	for n := 0; n <= 16; n++ {
		for i := 0; i < n; i++ {
			m[n][i/8] |= 0xff << (8 * (i % 8))
		}
	}
	return m
}()

func (c *ptCache) finish(a, b uint64, n int) uint64 {
	return mix(a^hashK2^c.seed, b^hashK3^uint64(n)) | 1
}

// hotIndex is the front-table index of the short key a, b of n bytes:
// wordIndex's two multiplies, cheaper than finish's 128-bit one, which only
// the slots past the front table need. It is not seeded: keys made to share
// a front-table slot only miss it, and the slots past it are indexed by the
// seeded hash.
func hotIndex(a, b uint64, n int) uint64 {
	return wordIndex(a, b, n) >> (64 - 16)
}

// hotFind returns the front-table slot of the short key a, b of n bytes and
// whether it holds that key.
func (c *ptCache) hotFind(a, b uint64, n int) (*hotSlot, bool) {
	if c.hot == nil {
		c.hot = writtenPages(make([]hotSlot, hotSlots), pageSize/24)
	}
	hs := &c.hot[hotIndex(a, b, n)&(hotSlots-1)]
	return hs, hs.a == a && hs.b == b && hs.klen == uint32(n)+1
}

// get appends the ids of p to dst; ok is false when p is not cached.
func (c *ptCache) get(dst []int32, p string, h, a, b uint64) ([]int32, bool) {
	var hs *hotSlot
	if len(p) <= 16 {
		var ok bool
		if hs, ok = c.hotFind(a, b, len(p)); ok {
			return append(dst, hs.id), true
		}
	}
	return c.getSlot(dst, p, h, a, b, hs)
}

// getSlot is get past the front table: hs is p's front-table slot (nil for
// a long key), filled when p is found with one id.
func (c *ptCache) getSlot(dst []int32, p string, h, a, b uint64, hs *hotSlot) ([]int32, bool) {
	mask := uint64(len(c.slots) - 1)
	if len(p) > 16 {
		b = h
	}
	for i := h & mask; ; i = (i + 1) & mask {
		s := &c.slots[i]
		if s.klen == 0 {
			return dst, false
		}
		if int(s.klen) != len(p) || s.b != b {
			continue
		}
		if len(p) > 16 {
			if string(c.keys[s.a:s.a+uint64(s.klen)]) != p {
				continue
			}
		} else if s.a != a {
			continue
		}
		switch {
		case s.n == 1:
			if hs != nil {
				*hs = hotSlot{a: a, b: b, klen: uint32(len(p)) + 1, id: s.ids[0]}
			}
			return append(dst, s.ids[0]), true
		case s.n <= 3:
			return append(dst, s.ids[:s.n]...), true
		}
		return append(dst, c.ids[s.ids[0]:s.ids[0]+int32(s.n)]...), true
	}
}

// put caches ids for p (1 <= len(p) <= maxCachedLen, 1 <= len(ids) <= 255).
func (c *ptCache) put(p string, h, a, b uint64, ids []int32) {
	if len(ids) == 0 || len(ids) > 255 || len(p) == 0 || len(p) > maxCachedLen {
		return
	}
	if c.count >= maxCacheEntries || len(c.keys)+len(p) > 1<<31 || len(c.ids)+len(ids) > 1<<31 {
		c.reset(len(c.slots))
	} else if (c.count+1)*4 > len(c.slots)*3 { // load factor at most 3/4
		c.grow()
	}
	s := ptSlot{a: a, b: b, klen: uint8(len(p)), n: uint8(len(ids))}
	if len(p) > 16 {
		s.a, s.b = uint64(len(c.keys)), h
		c.keys = append(c.keys, p...)
	}
	if len(ids) <= len(s.ids) {
		copy(s.ids[:], ids)
	} else {
		s.ids[0] = int32(len(c.ids))
		c.ids = append(c.ids, ids...)
	}
	c.insert(s, h)
	c.count++
}

// insert puts s in the first empty slot from h's.
func (c *ptCache) insert(s ptSlot, h uint64) {
	mask := uint64(len(c.slots) - 1)
	i := h & mask
	for c.slots[i].klen != 0 {
		i = (i + 1) & mask
	}
	c.slots[i] = s
}

func (c *ptCache) grow() {
	old, oldMem := c.slots, c.mem
	c.slots, c.mem = newSlots(2 * len(old))
	for i := range old {
		s := &old[i]
		switch {
		case s.klen > 16:
			c.insert(*s, s.b)
		case s.klen > 0:
			c.insert(*s, c.finish(s.a, s.b, int(s.klen)))
		}
	}
	runtime.KeepAlive(oldMem) // old's memory, until here
}

// newSlots returns n empty slots, written (writtenPages), and the Mem that
// owns them when they are huge pages (le.Huge: from 2 MiB, 65,536 slots).
// The first touch of fresh memory is a page fault for each of its pages,
// several microseconds each on this project's VMs. A cold pass over the
// 52K Alpaca prompts grows the cache to 4 MiB of slots: 518 page faults in
// the pass with small pages, 58 with these (Qwen2.5).
func newSlots(n int) ([]ptSlot, *le.Mem) {
	s, m := le.Huge[ptSlot](n)
	return writtenPages(s, pageSize/32), m
}

// writtenPages writes s's zero value into one element of each memory page
// of s (step elements apart, step * the element's size <= pageSize) and
// returns s. Memory fresh from the OS that is read before it is written
// faults twice: the read maps the shared zero page, and the write copies it
// and flushes the TLB of every CPU the process runs on, an interrupt each
// (the encode loop's CPU too, when another goroutine builds a table). The
// tables that are read first (a cache's slots, put and get read a slot
// before they write it; the merges filter's words, or'ed in) are made
// with it: a cold pass of the bench's ids command took ~1,900 faults in the
// pre-token cache's put (4 MiB of slots), half of them such writes.
func writtenPages[T any](s []T, step int) []T {
	var zero T
	for i := 0; i < len(s); i += step {
		s[i] = zero
	}
	return s
}

// pageSize is 4 KiB: no CPU Go runs on has smaller memory pages.
const pageSize = 4096
