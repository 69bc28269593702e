package tokenize

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/ferryml/ferry/tokenize/internal/le"
)

// bpeModel is a byte-level BPE model whose vocabulary is keyed by raw bytes
// (the byte-level characters of tokenizer.json decoded), so that the text is
// never converted to byte-level characters.
type bpeModel struct {
	vocab     vocabIndex // raw bytes -> id, byte-level tokens only
	byteID    [256]int32 // id of each single byte, -1 when absent
	merges    mergeTable // left<<32|right -> order<<32|merged (get)
	bytePairs []uint64   // byte<<8|byte -> the merge of their ids (noRank<<32: none); nil when charLevel
	// selfBPE[id]: BPE of id's vocabulary key gives id alone, so that a
	// pre-token found in the vocabulary with this set needs no BPE (most
	// new words of a cold pass). nil with ignore_merges (the vocabulary is
	// looked up first anyway) and for character-level models.
	selfBPE []bool
	words   wordTable // short keys, each its own BPE
	// fast is what the encode loop reads of words and merges: the tables
	// themselves (publishTables, from finish), or their copies in huge
	// pages (upgradeTables); the two are equal, so a reader may hold either.
	fast         atomic.Pointer[fastTables]
	upgrading    sync.WaitGroup // upgradeTables, while it runs
	ignoreMerges bool
	unkID        int32 // -1 when there is no unk_token
	fuseUnk      bool

	// A character-level vocabulary (SentencePiece-style, no ByteLevel
	// pre-tokenizer): vocab is keyed by the tokens themselves and byteID
	// holds the single ASCII characters only.
	charLevel    bool
	byteFallback bool
	fallbackID   [256]int32 // id of <0xNN>, -1 when absent
	symCut       bool       // words may be cut before "▁" runs (see appendWords)
	symID        int32      // id of "▁" (spView)
}

const noRank = math.MaxUint32

// fastTables are the tables the encode loop probes at random.
type fastTables struct {
	words  wordTable
	merges mergeTable
	filter mergeFilter
}

// tables returns the tables to probe (see fast).
func (m *bpeModel) tables() *fastTables { return m.fast.Load() }

// publishTables makes m's words and merges the tables to probe, with the
// merges' filter when filtered (~3 ms for Llama-3.1's: a compiled
// tokenizer's Load leaves it to upgradeTables).
func (m *bpeModel) publishTables(filtered bool) {
	ft := &fastTables{words: m.words, merges: m.merges}
	if filtered {
		ft.filter = newMergeFilter(&m.merges)
	}
	m.fast.Store(ft)
}

// upgradeTables copies the words and merges tables into transparent huge
// pages where Linux has them (le.HugeCopy), and publishes the copies in
// fast: the encode loop probes both at random, and on 4 KiB pages most
// probes miss the TLB. A compiled tokenizer's tables are its cache file's
// mapped pages; Load starts this on a goroutine of its own (upgrading), so
// that Load does not wait for the copy (10-14 MB, whose first touch cost
// 1-20 ms on this VM) and encodes read the mapped tables until it is done.
// A cold pass over the 52K Alpaca prompts right after Load (fresh
// processes, medians of 10): +5.3% Qwen2.5, +6.8% Llama-3.1; +7.0% / +10.5%
// when Load made the copies itself, which made it 4-6 ms slower (medians;
// up to 34 ms). It also builds the merges' filter, which Load leaves out.
func (m *bpeModel) upgradeTables() {
	ft := *m.fast.Load()
	if s, mem := le.HugeCopy(ft.words.slots); mem != nil {
		ft.words.slots, ft.words.mem = s, mem
	}
	if s, mem := le.HugeCopy(ft.merges.slots); mem != nil {
		ft.merges.slots, ft.merges.mem = s, mem
	}
	ft.filter = newMergeFilter(&ft.merges)
	m.fast.Store(&ft)
}

func pairKey(a, b int32) uint64 { return uint64(uint32(a))<<32 | uint64(uint32(b)) }

// merge returns the rank and merged id of the pair (a, b).
func (m *bpeModel) merge(a, b int32) (rank uint32, merged int32) {
	v, ok := m.tables().merges.get(pairKey(a, b))
	if !ok {
		return noRank, -1
	}
	return uint32(v >> 32), int32(uint32(v))
}

// scratch is the per-call working memory of the BPE step.
type scratch struct {
	ids   []int32
	ranks []uint32
	nexts []int32
	prevs []int32
	heap  []heapItem
	pairs pairCache
}

// pairCache is a direct-mapped cache of merge lookups (pairKey|mergeUsed,
// then the merge or mergeAbsent) for mergeTiny, whose rounds look pairs up
// one after the other: a cold pass's new words share pairs (" un", "ing")
// whose slots in the merges table (megabytes) are out of the CPU's L2.
// 16 KiB, in the scratch of each state; mergeSmall's loop and the heap read
// the table, and FuzzBPEMergeLoops holds mergeTiny to them.
type pairCache [1 << pairCacheBits][2]uint64

const pairCacheBits = 10

// mergeAbsent is the value of a pair with no merge: noRank, and -1 as the
// merged id.
const mergeAbsent = uint64(noRank)<<32 | math.MaxUint32

// mergeCached is merge through the cache pc.
func (m *bpeModel) mergeCached(pc *pairCache, a, b int32) (rank uint32, merged int32) {
	key := pairKey(a, b) | mergeUsed
	e := &pc[(key*0xd6e8feb86659fd93)>>(64-pairCacheBits)]
	if e[0] != key {
		ft := m.tables()
		v := mergeAbsent
		if ft.filter.mayHave(key) {
			if w, ok := ft.merges.find(key &^ mergeUsed); ok {
				v = ft.merges.val(w)
			}
		}
		e[0], e[1] = key, v
	}
	return uint32(e[1] >> 32), int32(uint32(e[1]))
}

// initial appends the ids of the single bytes of word to sc.ids, as HF's BPE
// does with the byte-level characters: a byte without an id becomes unk (fused
// with a preceding unk when fuse_unk) or is dropped when there is no unk.
func (m *bpeModel) initial(sc *scratch, word string) []int32 {
	if m.charLevel {
		return m.initialChars(sc, word)
	}
	ids := sc.ids[:0]
	prevUnk := false
	for i := 0; i < len(word); i++ {
		id := m.byteID[word[i]]
		if id >= 0 {
			ids = append(ids, id)
			prevUnk = false
			continue
		}
		if m.unkID < 0 {
			continue
		}
		if !(m.fuseUnk && prevUnk) {
			ids = append(ids, m.unkID)
		}
		prevUnk = true
	}
	sc.ids = ids
	return ids
}

// heapThreshold is the word length from which the O(n log n) merge loop is
// used instead of the simple O(n²) one. Both give the same result: the pair of
// lowest rank is merged first, the leftmost one among equal ranks.
const heapThreshold = 48

// appendBPE appends the ids of one pre-token (raw bytes) to dst.
func (m *bpeModel) appendBPE(dst []int32, word string, sc *scratch) []int32 {
	if m.ignoreMerges {
		if id, ok := m.vocab.get(word); ok {
			return append(dst, id)
		}
	} else if m.selfBPE != nil {
		if id, ok := m.vocab.get(word); ok && m.selfBPE[id] {
			return append(dst, id)
		}
	}
	return m.appendMerged(dst, word, sc)
}

// appendMerged is appendBPE of a word whose BPE is not its own id alone
// (not in m.words, or not looked up there): the merges from its bytes.
func (m *bpeModel) appendMerged(dst []int32, word string, sc *scratch) []int32 {
	if m.bytePairs != nil && len(word) >= 2 && len(word) <= tinyWord {
		// Every byte has an id (see buildBytePairs): mergeTiny reads them
		// from word.
		return m.mergeTiny(dst, nil, word, sc)
	}
	ids := m.initial(sc, word)
	if len(ids) >= heapThreshold {
		return m.mergeHeap(dst, ids, sc)
	}
	if m.bytePairs == nil {
		word = "" // ids are not the ids of word's bytes one to one
	}
	return m.mergeSmall(dst, ids, word, sc)
}

// mergeSmall merges ids; word, when not "", is the bytes whose ids they are
// (one id per byte), so that the first round reads m.bytePairs.
func (m *bpeModel) mergeSmall(dst []int32, ids []int32, word string, sc *scratch) []int32 {
	n := len(ids)
	if n <= 1 {
		return append(dst, ids...)
	}
	if n <= tinyWord {
		return m.mergeTiny(dst, ids, word, sc)
	}
	ranks := sc.ranks[:0]
	merged := sc.nexts[:0]
	if word != "" {
		bp := m.bytePairs[:1<<16]
		for i := 0; i+1 < n; i++ {
			v := bp[uint16(word[i])<<8|uint16(word[i+1])]
			ranks = append(ranks, uint32(v>>32))
			merged = append(merged, int32(uint32(v)))
		}
	} else {
		for i := 0; i+1 < n; i++ {
			r, id := m.merge(ids[i], ids[i+1])
			ranks = append(ranks, r)
			merged = append(merged, id)
		}
	}
	for n > 1 {
		best := lowest(ranks[:n-1])
		if uint32(best>>32) == noRank {
			break
		}
		bi := int(uint32(best))
		ids[bi] = merged[bi]
		// Remove id bi+1 and pair bi (one loop, not copy: the words are
		// short and a memmove call per merge costs more than moving a few
		// ids).
		for j := bi + 1; j < n-1; j++ {
			ids[j] = ids[j+1]
			ranks[j-1], merged[j-1] = ranks[j], merged[j]
		}
		n--
		if bi > 0 {
			ranks[bi-1], merged[bi-1] = m.merge(ids[bi-1], ids[bi])
		}
		if bi+1 < n {
			ranks[bi], merged[bi] = m.merge(ids[bi], ids[bi+1])
		}
	}
	if cap(ranks) > cap(sc.ranks) || cap(merged) > cap(sc.nexts) { // grown: keep (no write barrier otherwise)
		sc.ranks, sc.nexts = ranks, merged
	}
	return append(dst, ids[:n]...)
}

// tinyWord is the most ids mergeTiny merges.
const tinyWord = 16

// mergeTiny is mergeSmall for 2 to tinyWord ids, with no loop whose length
// depends on the word's (whose exits a cold pass's new words mispredict):
// the ids stay where they are, linked by next (a merge unlinks the right
// one), and the lowest rank is found over every pair slot (noRank for none,
// or one whose left id was merged away). A slot's index is its id's place
// in the word, so the lowest index is the leftmost pair, as in mergeSmall.
// A round makes two merges where the second-best pair comes next (see the
// loop). Its lookups go through sc's pairCache. With word (2 to tinyWord
// bytes, of a model with bytePairs) it merges the ids of word's bytes and
// does not read ids (appendMerged passes none).
func (m *bpeModel) mergeTiny(dst []int32, ids []int32, word string, sc *scratch) []int32 {
	pc := &sc.pairs
	var id, merged [tinyWord]int32
	// keys[i] is pair i's rank<<32 | i, so that the least key is the pair
	// to merge, the leftmost among equal ranks (noRank<<32 | i: none).
	next, prev, keys := tinyNext, tinyPrev, tinyKeys
	n := len(ids)
	if word != "" {
		n = len(word)
		bp := m.bytePairs[:1<<16]
		c0 := word[0]
		id[0] = m.byteID[c0]
		for i := 1; i < n; i++ {
			c1 := word[i]
			v := bp[uint16(c0)<<8|uint16(c1)]
			id[i] = m.byteID[c1]
			keys[i-1], merged[i-1] = v&^math.MaxUint32|uint64(i-1), int32(uint32(v))
			c0 = c1
		}
	} else {
		copy(id[:], ids[:n:n])
		for i := 0; i+1 < n; i++ {
			keys[i], merged[i] = m.mergeKey(pc, id[i], id[i+1], i)
		}
	}
	for {
		best := lowestTiny(&keys)
		if uint32(best>>32) == noRank {
			break
		}
		i := uint8(best) % tinyWord
		j := next[i] % tinyWord // merged into i
		nj, p := next[j], prev[i]
		id[i] = merged[i]
		next[i] = nj
		if int(nj) < n {
			prev[nj%tinyWord] = i
		}
		keys[i], keys[j] = tinyKeys[i], tinyKeys[j]
		if p < tinyWord {
			keys[p] = tinyKeys[p]
		}
		// The best of the pairs this merge leaves as they are (i's and p's
		// are new) is merged in the same round when it is the next round's
		// best: lower than the new pairs. Its merge's new pairs are looked
		// up beside this one's, in the word as it is after both. BPE's
		// pair lookups are a chain of misses past the CPU's L2, each
		// round's pairs known only from the round before: where the
		// second-best pair comes next, two rounds are one link.
		second := lowestTiny(&keys)
		ki, kp := tinyKeys[i], uint64(0)
		var mi, mp int32
		if int(nj) < n {
			ki, mi = m.mergeKey(pc, id[i], id[nj%tinyWord], int(i))
		}
		if p < tinyWord {
			kp, mp = m.mergeKey(pc, id[p], id[i], int(p))
		}
		keys[i], merged[i] = ki, mi
		if p < tinyWord {
			keys[p], merged[p] = kp, mp
		}
		if uint32(second>>32) == noRank {
			continue
		}
		// After this round's merge: the pair right after it (i2 is nj)
		// has i on its left, the one right before it (j2 is p) has i on
		// its right.
		i2 := uint8(second) % tinyWord
		j2 := next[i2] % tinyWord
		nj2, p2 := next[j2], prev[i2]
		id2 := merged[i2]
		ki2, kp2 := tinyKeys[i2], uint64(0)
		var mi2, mp2 int32
		if int(nj2) < n {
			ki2, mi2 = m.mergeKey(pc, id2, id[nj2%tinyWord], int(i2))
		}
		if p2 < tinyWord {
			kp2, mp2 = m.mergeKey(pc, id[p2], id2, int(p2))
		}
		if second > ki || p < tinyWord && second > kp {
			continue // a new pair comes first: the next round finds it
		}
		// Second's merge, after this one's: where the two are neighbours,
		// its keys replace this one's (p2 is i: i's pair is now with
		// id2; j2 is p: p is merged away).
		id[i2] = id2
		next[i2] = nj2
		if int(nj2) < n {
			prev[nj2%tinyWord] = i2
		}
		keys[i2], merged[i2] = ki2, mi2
		keys[j2] = tinyKeys[j2]
		if p2 < tinyWord {
			keys[p2], merged[p2] = kp2, mp2
		}
	}
	for i := uint8(0); int(i) < n; i = next[i%tinyWord] {
		dst = append(dst, id[i%tinyWord])
	}
	return dst
}

// The starting links and keys of mergeTiny's slots: each linked to the
// next and the previous (none for the first: 255), no merge.
var (
	tinyNext, tinyPrev = func() (next, prev [tinyWord]uint8) {
		for i := range next {
			next[i], prev[i] = uint8(i+1), uint8(i-1)
		}
		return next, prev
	}()
	tinyKeys = func() (k [tinyWord]uint64) {
		for i := range k {
			k[i] = uint64(noRank)<<32 | uint64(i)
		}
		return k
	}()
)

// mergeKey is mergeCached as mergeTiny's key of pair slot i, and the merged id.
func (m *bpeModel) mergeKey(pc *pairCache, a, b int32, i int) (uint64, int32) {
	r, merged := m.mergeCached(pc, a, b)
	return uint64(r)<<32 | uint64(i), merged
}

// lowestTiny is the least of mergeTiny's keys, as a tree of 15 mins
// (conditional moves) with no loop.
func lowestTiny(k *[tinyWord]uint64) uint64 {
	a0, a1, a2, a3 := min(k[0], k[1]), min(k[2], k[3]), min(k[4], k[5]), min(k[6], k[7])
	a4, a5, a6, a7 := min(k[8], k[9]), min(k[10], k[11]), min(k[12], k[13]), min(k[14], k[15])
	return min(min(min(a0, a1), min(a2, a3)), min(min(a4, a5), min(a6, a7)))
}

// lowest returns the least rank<<32|i of ranks: the lowest rank, the
// leftmost among equals; MaxUint64 for none. A function of its own, so that
// best stays in a register and min is a conditional move, not a branch per
// pair (in mergeSmall's body it was spilled and branched: a third of a cold
// pass's mispredicted branches).
//
//go:noinline
func lowest(ranks []uint32) uint64 {
	best := uint64(math.MaxUint64)
	for i, r := range ranks {
		best = min(best, uint64(r)<<32|uint64(i))
	}
	return best
}

type heapItem struct {
	rank   uint32
	pos    int32
	merged int32
}

func (a heapItem) less(b heapItem) bool {
	return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos)
}

func heapPush(h []heapItem, it heapItem) []heapItem {
	h = append(h, it)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !h[i].less(h[p]) {
			break
		}
		h[i], h[p] = h[p], h[i]
		i = p
	}
	return h
}

func heapPop(h []heapItem) ([]heapItem, heapItem) {
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	i := 0
	for {
		l := 2*i + 1
		if l >= len(h) {
			break
		}
		c := l
		if r := l + 1; r < len(h) && h[r].less(h[l]) {
			c = r
		}
		if !h[c].less(h[i]) {
			break
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
	return h, top
}

// mergeHeap is HF's merge loop: a priority queue of candidate merges over a
// linked list of symbols; stale entries are skipped when popped.
func (m *bpeModel) mergeHeap(dst []int32, ids []int32, sc *scratch) []int32 {
	n := len(ids)
	nexts := growInt32(sc.nexts, n)
	prevs := growInt32(sc.prevs, n)
	h := sc.heap[:0]
	for i := 0; i < n; i++ {
		prevs[i] = int32(i - 1)
		nexts[i] = int32(i + 1)
		if i+1 < n {
			if r, id := m.merge(ids[i], ids[i+1]); r != noRank {
				h = heapPush(h, heapItem{r, int32(i), id})
			}
		}
	}
	nexts[n-1] = -1
	const dead = -2
	for len(h) > 0 {
		var it heapItem
		h, it = heapPop(h)
		p := it.pos
		if prevs[p] == dead {
			continue
		}
		q := nexts[p]
		if q < 0 {
			continue
		}
		if r, id := m.merge(ids[p], ids[q]); r != it.rank || id != it.merged {
			continue
		}
		ids[p] = it.merged
		nexts[p] = nexts[q]
		if nexts[q] >= 0 {
			prevs[nexts[q]] = p
		}
		prevs[q] = dead
		if pp := prevs[p]; pp >= 0 {
			if r, id := m.merge(ids[pp], ids[p]); r != noRank {
				h = heapPush(h, heapItem{r, pp, id})
			}
		}
		if nq := nexts[p]; nq >= 0 {
			if r, id := m.merge(ids[p], ids[nq]); r != noRank {
				h = heapPush(h, heapItem{r, p, id})
			}
		}
	}
	for i := int32(0); i >= 0; i = nexts[i] {
		dst = append(dst, ids[i])
	}
	sc.nexts, sc.prevs, sc.heap = nexts, prevs, h
	return dst
}

func growInt32(s []int32, n int) []int32 {
	if cap(s) < n {
		return make([]int32, n, n+n/2)
	}
	return s[:n]
}

// state is the per-goroutine working memory of AppendEncode: BPE scratch
// space and a cache of pre-token -> ids. States live in the Tokenizer's
// statePool, from which each call (or a Session) takes one, so each running
// goroutine has its own.
type state struct {
	scratch
	cache  *ptCache
	pcache *ptCache  // spView: words with the "▁" put in front, made on first use
	nbuf   [2][]byte // normalizeState's buffers
	// addedMemo is trie.longest's memo for the raw and the normalized
	// added tokens (rawTrie, normTrie).
	addedMemo [2]int32
	home      uint32       // its shard in the statePool
	blocks    blockScanner // appendBlocks'
}

func newState() *state {
	return &state{cache: newPTCache()}
}

// statePool keeps idle states. Unlike sync.Pool it never drops them (a GC
// would empty the caches, and the race detector drops items on purpose), so a
// warm AppendEncode does not allocate. It is sharded to keep goroutines from
// contending on one lock. It holds at most as many states as were in use at once.
type statePool struct {
	next   atomic.Uint32
	shards []stateShard
}

type stateShard struct {
	mu   sync.Mutex
	n    atomic.Int32 // len(free), readable without the lock
	free []*state
	_    [32]byte // keep shards on separate cache lines
}

func (p *statePool) init() {
	n := 1
	for n < 2*runtime.GOMAXPROCS(0) {
		n *= 2
	}
	p.shards = make([]stateShard, n)
}

func (p *statePool) get() *state {
	mask := uint32(len(p.shards) - 1)
	start := p.next.Add(1)
	for k := uint32(0); k <= mask; k++ {
		i := (start + k) & mask
		sh := &p.shards[i]
		if sh.n.Load() == 0 {
			continue
		}
		sh.mu.Lock()
		if n := len(sh.free); n > 0 {
			st := sh.free[n-1]
			sh.free = sh.free[:n-1]
			sh.n.Store(int32(n - 1))
			sh.mu.Unlock()
			return st
		}
		sh.mu.Unlock()
	}
	st := newState()
	st.home = start & mask
	return st
}

func (p *statePool) put(st *state) {
	sh := &p.shards[st.home]
	sh.mu.Lock()
	sh.free = append(sh.free, st)
	sh.n.Store(int32(len(sh.free)))
	sh.mu.Unlock()
}

// buildSelfBPE fills m.selfBPE for a byte-level model without
// ignore_merges: BPE of every vocabulary key, on two goroutines.
func (m *bpeModel) buildSelfBPE(nIDs int) {
	m.selfBPE = nil
	if m.charLevel || m.ignoreMerges {
		return
	}
	self := make([]bool, nIDs)
	var ids []int32
	m.vocab.all(func(_ string, id int32) bool {
		ids = append(ids, id)
		return true
	})
	var wg sync.WaitGroup
	parts := min(2, len(ids)/1024+1)
	for p := range parts {
		wg.Go(func() {
			var sc scratch
			var out []int32
			for _, id := range ids[p*len(ids)/parts : (p+1)*len(ids)/parts] {
				out = m.appendBPE(out[:0], m.vocab.key(uint32(id)), &sc)
				self[id] = len(out) == 1 && out[0] == id
			}
		})
	}
	wg.Wait()
	m.selfBPE = self
}
