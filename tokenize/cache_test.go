package tokenize

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestShortWords checks that the words appendScanned reads from the text
// (shortKey) identify a short key as hash does, so that a pre-token put at
// the end of a text (hash) is found in the middle of another, and that keys
// of different bytes or lengths never share words.
func TestShortWords(t *testing.T) {
	c := newPTCache()
	r := rand.New(rand.NewPCG(1, 2))
	seen := map[[3]uint64]string{}
	for range 20000 {
		n := r.IntN(17)
		s := make([]byte, 16+r.IntN(8))
		for i := range s {
			s[i] = byte(r.IntN(4)) // few symbols: many near-equal keys, zero bytes too
		}
		h, a, b := c.hash(string(s[:n]))
		wa, wb := shortKey(load64(string(s), 0), load64(string(s), 8), n)
		if wa != a || wb != b || c.finish(wa, wb, n) != h {
			t.Fatalf("%q: shortKey %x %x, hash %x %x", s[:n], wa, wb, a, b)
		}
		k := [3]uint64{a, b, uint64(n)}
		if p, ok := seen[k]; ok && p != string(s[:n]) {
			t.Fatalf("%q and %q share a, b and length", p, s[:n])
		}
		seen[k] = string(s[:n])
	}
}

// TestKeyAt checks keyAt against hash at every start and length of short
// keys in texts of 16 to 40 bytes, near their end above all, where keyAt
// shifts the last 16 bytes.
func TestKeyAt(t *testing.T) {
	c := newPTCache()
	r := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		s := make([]byte, 16+r.IntN(25))
		for i := range s {
			s[i] = byte(r.IntN(256))
		}
		text := string(s)
		for pos := range len(text) {
			for n := 1; n <= 16 && pos+n <= len(text); n++ {
				_, a, b := c.hash(text[pos : pos+n])
				if ka, kb := keyAt(text, pos, n); ka != a || kb != b {
					t.Fatalf("%q at %d, %d bytes: keyAt %x %x, hash %x %x", text, pos, n, ka, kb, a, b)
				}
			}
		}
	}
}

// TestPTCache puts more keys than a cache holds: each get gives the ids put
// for that key or nothing (after the cache started over), never another's.
func TestPTCache(t *testing.T) {
	c := newPTCache()
	r := rand.New(rand.NewPCG(3, 4))
	keys := make([]string, maxCacheEntries+maxCacheEntries/2)
	for i := range keys {
		b := make([]byte, 1+r.IntN(40))
		for j := range b {
			b[j] = 'a' + byte(r.IntN(3))
		}
		keys[i] = string(b)
	}
	want := func(k string) []int32 { // 1 to 5 ids derived from the key (the slot holds 3)
		ids := []int32{int32(len(k))}
		for i := 0; i < len(k)%5; i++ {
			ids = append(ids, int32(k[i]))
		}
		return ids
	}
	found := 0
	for _, k := range keys {
		h, a, b := c.hash(k)
		got, ok := c.get(nil, k, h, a, b)
		if ok {
			found++
			if !slices.Equal(got, want(k)) {
				t.Fatalf("%q: %v, want %v", k, got, want(k))
			}
			continue
		}
		c.put(k, h, a, b, want(k))
	}
	if found == 0 || c.count > maxCacheEntries {
		t.Fatalf("%d keys found again, %d entries", found, c.count)
	}
}

// checkMergeTable holds mt, built from kvs, to what they say: every pair's
// merged id is that of its last merge, the orders of the pairs compare as
// the ranks (indices) of their last merges do, and a pair not in kvs is not
// found. extra are more pairs to look up.
func checkMergeTable(t *testing.T, name string, mt *mergeTable, kvs []mergeKV, extra []uint64) {
	t.Helper()
	last := map[uint64]int{}
	for i, e := range kvs {
		last[e.key] = i
	}
	prev := int64(-1)
	for i, e := range kvs {
		if last[e.key] != i {
			continue
		}
		got, ok := mt.get(e.key)
		if !ok || int32(uint32(got)) != e.merged || int64(got>>32) <= prev || uint32(got>>32) == noRank {
			t.Fatalf("%s: merge %d %#x: get %#x %v, want merged %d and an order above %d", name, i, e.key, got, ok, e.merged, prev)
		}
		prev = int64(got >> 32)
	}
	for _, k := range extra {
		if _, in := last[k]; in {
			continue
		}
		if got, ok := mt.get(k); ok {
			t.Fatalf("%s: %#x found (%#x), not a merge", name, k, got)
		}
	}
}

// TestMergeTable checks the merges table against its merges: with merged
// ids that never decrease along the ranks (kept in the slots) and random
// ones (aside), repeated pairs (the last counts, as buildMerges needs), the
// pair of ids 0 and 0 (not an empty slot), and the model's last id.
func TestMergeTable(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	const n = 50000
	for _, monotone := range []bool{true, false} {
		kvs := make([]mergeKV, n)
		for i := range kvs {
			kvs[i] = mergeKV{pairKey(int32(r.IntN(3000)), int32(r.IntN(3000))), int32(r.IntN(3000))}
			if monotone {
				kvs[i].merged = int32(i / 20)
			}
		}
		kvs = append(kvs, mergeKV{pairKey(0, 0), 2999})
		if monotone {
			kvs[n].merged = n / 20
		}
		mt, err := newMergeTable(kvs, 4999)
		if err != nil {
			t.Fatal(err)
		}
		if (mt.side == nil) != monotone {
			t.Fatalf("monotone %v: side %d", monotone, len(mt.side))
		}
		var extra []uint64
		for range 10000 {
			extra = append(extra, pairKey(int32(3000+r.IntN(1000)), int32(r.IntN(5000))), pairKey(int32(r.IntN(3000)), int32(r.IntN(3000))))
		}
		extra = append(extra, pairKey(4999, 0), pairKey(0, 4999), pairKey(4999, 4999))
		checkMergeTable(t, fmt.Sprintf("monotone %v", monotone), &mt, kvs, extra)
	}
	// Ids of more than maxMergeIDBits bits are refused.
	if _, err := newMergeTable([]mergeKV{{pairKey(1, 1), 2}}, 1<<maxMergeIDBits); err == nil {
		t.Fatal("ids past maxMergeIDBits taken")
	}
}

// probeDistance is the number of slots past its first where the short key
// a, b of n bytes is in w (-1: not in it), from w's slots alone (its long
// ones for more than shortWord bytes).
func probeDistance(w *wordTable, a, b uint64, n int) int {
	if n > shortWord {
		size := uint64(len(w.long) / 3)
		h := wordIndex(a, b, n) >> w.longShift
		for d := uint64(0); d < size; d++ {
			s := w.long[3*((h+d)%size):]
			if s[2] == 0 {
				return -1
			}
			if s[0] == a && s[1] == b && uint32(s[2]) == uint32(n+1) {
				return int(d)
			}
		}
		return -1
	}
	size := uint64(len(w.slots) / 2)
	h := shortIndex(a, wordTag(b, n)) >> w.shift
	for d := uint64(0); d < size; d++ {
		s := w.slots[2*((h+d)%size):]
		if s[1] == 0 {
			return -1
		}
		if s[0] == a && uint32(s[1]) == uint32(b) && uint8(s[1]>>32) == uint8(n+1) {
			return int(d)
		}
	}
	return -1
}

// TestWordTable holds every family's word table to BPE: a key of 1 to 16
// bytes is in it exactly when appendBPE gives the id the vocabulary maps it
// to, alone, and then with that id; the key with a byte more or less is
// not found unless it is a word too.
// home and near find a key exactly at its first and second probe.
func TestWordTable(t *testing.T) {
	for _, fam := range families {
		t.Run(fam, func(t *testing.T) {
			m := &loadModel(t, fam).model
			if m.charLevel {
				if m.words.n != 0 || len(m.words.slots) != 2*minWordSlots || len(m.words.long) != 3*minWordSlots {
					t.Fatalf("a character-level model: %d words in %d and %d slots, want none in %d", m.words.n, len(m.words.slots)/2, len(m.words.long)/3, minWordSlots)
				}
				return
			}
			var sc scratch
			words, checked, past, longs := 0, 0, 0, 0
			for id := 0; id+1 < len(m.vocab.ends); id++ {
				k := m.vocab.key(uint32(id))
				if len(k) == 0 || len(k) > 16 {
					continue
				}
				checked++
				a, b := keyOf(k)
				got, ok := m.words.find(a, b, len(k))
				// home finds a key of up to shortWord bytes at probe 0, and
				// only there; a longer one never.
				d := probeDistance(&m.words, a, b, len(k))
				hid, hok := m.words.home(a, b, len(k))
				short := len(k) <= shortWord
				if hok != (ok && short && d == 0) || hok && hid != got {
					t.Fatalf("id %d %q at probe %d: home %v (%d), find %v (%d)", id, k, d, hok, hid, ok, got)
				}
				if ok && short && d > 0 {
					past++
				}
				vid, inVocab := m.vocab.get(k)
				bpe := m.appendBPE(nil, k, &sc)
				want := inVocab && len(bpe) == 1 && bpe[0] == vid
				if ok != want || ok && got != vid {
					t.Fatalf("id %d %q: found %v (%d); BPE %v, vocabulary %d %v", id, k, ok, got, bpe, vid, inVocab)
				}
				if ok {
					words++
					if !short {
						longs++
					}
				}
				for _, o := range []string{k + "\x00", k[:len(k)-1]} {
					if len(o) == 0 || len(o) > 16 {
						continue
					}
					oa, ob := keyOf(o)
					if _, ok := m.words.find(oa, ob, len(o)); ok {
						if _, in := m.vocab.get(o); !in {
							t.Fatalf("%q: found, not in the vocabulary", o)
						}
					}
				}
			}
			if words != m.words.n || words < checked/2 || past == 0 || longs == 0 {
				t.Fatalf("%d words of %d keys checked (%d past their first probe, %d longer than shortWord), the table holds %d", words, checked, past, longs, m.words.n)
			}
			t.Logf("%d of %d keys of 1 to 16 bytes (%d past their first probe, %d longer than shortWord), %d and %d slots", words, checked, past, longs, len(m.words.slots)/2, len(m.words.long)/3)
		})
	}
}
