package tokenize

import (
	"math/bits"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/text/unicode/norm"

	"github.com/ferryml/ferry/tokenize/internal/classify"
)

// Special describes the special tokens of a tokenizer. IDs are -1 when absent.
type Special struct {
	BOS, EOS, Pad       string
	BOSID, EOSID, PadID int32
	// AddBOS is true when the post-processor prepends tokens (Llama-3's
	// <|begin_of_text|>) with addSpecial; AddEOS when it appends some.
	// PostProcessorIDs returns those ids.
	AddBOS bool
	AddEOS bool
}

// Tokenizer encodes text to token ids and back. It is immutable after Load
// and safe for concurrent use.
type Tokenizer struct {
	sha       string
	vocabSize int
	model     bpeModel
	norms     []normStep
	// asciiStable: every normalizer leaves ASCII text as it is
	asciiStable bool

	// pre-tokenizer
	byteLevel bool
	stages    []preStage
	fastScan  scanKind // the only stage, when it has a scanner
	meta      *metaspace
	spView    spViewKind
	spPrepend bool

	// added tokens
	addedByID      map[int32]*addedToken
	addedByContent map[string]int32
	rawTrie        *trie // normalized=false (or no normalizer): matched in the input
	normTrie       *trie // normalized=true: matched in the normalized text

	// post-processor
	hasTemplate    bool
	prefix, suffix []int32

	// id -> token string, raw bytes for Decode, whether the id exists, whether it is special
	tokens     []string
	decoded    []string
	isToken    []bool
	isSpecial  []bool
	oddTokens  map[string]int32 // vocab tokens that are not byte-level strings
	joinDecode bool             // no decoder: Decode joins tokens with spaces, as HF
	decSteps   []decStep        // the decoder chain
	fastDecode bool             // the decoder is ByteLevel alone over a byte-level model

	special Special
	states  statePool
	// compiled: the model's tables were read from the compiled cache
	compiled bool
}

// preStage is one step of the pre-tokenizer.
type preStage struct {
	scan        scanKind       // a hand-written Split scanner, or
	re          *regexSplitter // a regex Split, or
	pattern     string         // the regex of an Isolated Split
	prefixSpace bool           // ByteLevel's add_prefix_space, or
	digits      bool           // Digits: numeric characters split from the rest,
	individual  bool           // each one a piece of its own (individual_digits)
}

func (t *Tokenizer) finish() {
	// The merges are built (or read); the words are when compiled, else
	// published again after buildWords.
	t.model.publishTables(false)
	// DeepSeek's three Splits have one scanner for all three.
	for i := 0; i+3 <= len(t.stages); i++ {
		if t.stages[i].pattern == PatternDeepSeekDigits && t.stages[i+1].pattern == PatternDeepSeekCJK && t.stages[i+2].pattern == PatternDeepSeek {
			t.stages = append(append(t.stages[:i:i], preStage{scan: scanDeepSeek}), t.stages[i+3:]...)
		}
	}
	// So have SmolLM2's Digits(individual_digits) and ByteLevel regex.
	for i := 0; i+2 <= len(t.stages); i++ {
		if t.stages[i].digits && t.stages[i].individual && t.stages[i+1].scan == scanGPT2 {
			t.stages = append(append(t.stages[:i:i], preStage{scan: scanDigitsGPT2}), t.stages[i+2:]...)
		}
	}
	if len(t.stages) == 1 && t.stages[0].scan != scanNone {
		t.fastScan = t.stages[0].scan
	}
	t.asciiStable = true
	for _, n := range t.norms {
		t.asciiStable = t.asciiStable && n.isForm
	}
	t.initSPView()
	if t.model.bytePairs == nil { // the compiled cache has them
		t.model.buildBytePairs()
	}
	if !t.compiled { // the compiled cache has them
		t.model.buildSelfBPE(len(t.model.vocab.ends) - 1)
		t.model.buildWords()
		t.model.publishTables(true)
	}
	t.fastDecode = !t.model.charLevel && len(t.decSteps) == 1 && t.decSteps[0].kind == decByteLevel
	t.special = Special{BOSID: -1, EOSID: -1, PadID: -1, AddBOS: len(t.prefix) > 0, AddEOS: len(t.suffix) > 0}
	// An added token by its content (t.tokens has Llama-2's "▁<s>").
	name := func(id int32) string {
		if a := t.addedByID[id]; a != nil {
			return a.Content
		}
		return t.tokens[id]
	}
	if len(t.prefix) == 1 {
		t.special.BOSID = t.prefix[0]
		t.special.BOS = name(t.prefix[0])
	}
	if len(t.suffix) == 1 {
		t.special.EOSID = t.suffix[0]
		t.special.EOS = name(t.suffix[0])
	}
	t.states.init()
}

// Special returns the special tokens: from tokenizer_config.json when Load
// found one, else what the post-processor adds.
func (t *Tokenizer) Special() Special { return t.special }

// PostProcessorIDs returns the ids the post-processor puts before and after
// the ids of every text when AppendEncode is called with addSpecial
// (Llama-3: [<|begin_of_text|>] and none): AppendEncode(dst, text, true) is
// dst + prefix + AppendEncode(nil, text, false) + suffix. Special().AddBOS
// and AddEOS report whether they are non-empty. The slices are copies.
func (t *Tokenizer) PostProcessorIDs() (prefix, suffix []int32) {
	return slices.Clone(t.prefix), slices.Clone(t.suffix)
}

// SHA256 returns the hex SHA-256 of the (decompressed) tokenizer.json bytes.
func (t *Tokenizer) SHA256() string { return t.sha }

// VocabSize returns the number of ids: model vocabulary plus added tokens
// (HF's get_vocab_size(with_added_tokens=True)).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenID returns the id of a token as written in tokenizer.json: an added
// token's content or a (byte-level) vocabulary entry.
func (t *Tokenizer) TokenID(token string) (int32, bool) {
	if id, ok := t.addedByContent[token]; ok {
		return id, true
	}
	if t.model.charLevel {
		return t.model.vocab.get(token)
	}
	if id, ok := t.oddTokens[token]; ok {
		return id, true
	}
	raw, ok := byteLevelDecode(token)
	if !ok {
		return -1, false
	}
	id, ok := t.model.vocab.get(string(raw))
	if !ok || t.tokens[id] != token {
		return -1, false
	}
	return id, true
}

// Token returns the token string of id and whether id exists.
func (t *Tokenizer) Token(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.tokens) || !t.isToken[id] {
		return "", false
	}
	return t.tokens[id], true
}

// Encode returns the ids of text; see AppendEncode.
func (t *Tokenizer) Encode(text string, addSpecial bool) []int32 {
	return t.AppendEncode(make([]int32, 0, len(text)/3+4), text, addSpecial)
}

// AppendEncode appends the ids of text to dst and returns the extended slice,
// as HF tokenizers' encode(text, add_special_tokens=addSpecial) would give.
// Added-token strings found in text (special or not) become their ids;
// addSpecial adds what the post-processor adds (Llama-3: BOS). Invalid UTF-8
// is first replaced with U+FFFD as Python's and JavaScript's decoders do.
// Once the pre-token cache is warm and the text needs no normalization,
// AppendEncode does not allocate (beyond growing dst). Safe for concurrent use.
func (t *Tokenizer) AppendEncode(dst []int32, text string, addSpecial bool) []int32 {
	st := t.states.get()
	dst = t.appendEncode(dst, text, addSpecial, st)
	t.states.put(st)
	return dst
}

// A Session is AppendEncode for a run of texts on one goroutine: it holds one
// working state (the pre-token cache and BPE scratch) from Session to Close,
// where AppendEncode takes one from the Tokenizer's pool and gives it back on
// every call (about 7 atomic operations: 5-45 ns a call on warm Alpaca
// prompts here, ~1-2% of one's encoding). The ids are AppendEncode's. A
// Session is not safe for concurrent use; after Close its AppendEncode is
// the Tokenizer's.
type Session struct {
	t  *Tokenizer
	st *state
}

// Session takes a working state from t's pool until the Session's Close.
func (t *Tokenizer) Session() Session {
	return Session{t: t, st: t.states.get()}
}

// AppendEncode is the Tokenizer's AppendEncode, with the Session's state.
func (s *Session) AppendEncode(dst []int32, text string, addSpecial bool) []int32 {
	if s.st == nil {
		return s.t.AppendEncode(dst, text, addSpecial)
	}
	return s.t.appendEncode(dst, text, addSpecial, s.st)
}

// Prefetch starts bringing text's first bytes (classify.PrefetchLen) into
// the CPU's caches and returns at once: a PREFETCHT0 a cache line on amd64,
// nothing elsewhere. A loop over texts that calls it with the next text
// before it encodes the current one finds that text's bytes in the caches
// when it gets to it, where the first read of each text (the ASCII check)
// waited on memory: that read was 7-9% of the bench's ids command's
// encoding in a profile, and the command read 2.2% (Qwen2.5) and 6.4%
// (Llama-3.1) faster with it (medians of 10-12 alternating runs).
func (s *Session) Prefetch(text string) { classify.Prefetch(text) }

// Close gives the Session's state back to the Tokenizer's pool. It may be
// called more than once.
func (s *Session) Close() {
	if s.st != nil {
		s.t.states.put(s.st)
		s.st = nil
	}
}

func (t *Tokenizer) appendEncode(dst []int32, text string, addSpecial bool, sc *state) []int32 {
	ascii := isASCII(text) // valid, and unchanged by every normalizer
	if !ascii {
		text = toValid(text)
	}
	if addSpecial {
		dst = append(dst, t.prefix...)
	}
	if t.rawTrie.empty() {
		dst = t.appendNormalized(dst, text, ascii, true, sc)
	} else {
		prev := 0
		for {
			m, ok := t.rawTrie.find(text, prev, prev, &sc.addedMemo[0])
			if !ok {
				break
			}
			if m.start > prev {
				dst = t.appendNormalized(dst, text[prev:m.start], ascii, prev == 0, sc)
			}
			dst = append(dst, m.tok.ID)
			prev = m.end
		}
		if prev < len(text) {
			dst = t.appendNormalized(dst, text[prev:], ascii, prev == 0, sc)
		}
	}
	if addSpecial {
		dst = append(dst, t.suffix...)
	}
	return dst
}

// normalizeLikeHF is f.String(s) with the two differences between
// golang.org/x/text and HF tokenizers (Rust's unicode-normalization crate)
// removed. HF does not write the stream-safe text format, so there is no
// U+034F after 30 non-starters (normalizeForm). And HF's tables predate
// Unicode 13: HF does not know U+11938 DIVES AKURU VOWEL
// SIGN O, so it neither composes U+11935 U+11930 into it nor decomposes it.
// No other character composes with U+11938, so the text is normalized in
// pieces split at each U+11938, which is kept as it is.
func normalizeLikeHF(f norm.Form, s string) string {
	const diveAkuru = "\xf0\x91\xa4" // the first 3 bytes of U+11900..U+1193F
	const composed, decomposed = "\U00011938", "\U00011935\U00011930"
	if !strings.Contains(s, diveAkuru) {
		return normalizeForm(f, s)
	}
	var b strings.Builder
	for i, piece := range strings.Split(s, composed) {
		if i > 0 {
			b.WriteString(composed)
		}
		b.WriteString(strings.ReplaceAll(normalizeForm(f, piece), composed, decomposed))
	}
	return b.String()
}

func (t *Tokenizer) appendNormalized(dst []int32, seg string, ascii, first bool, sc *state) []int32 {
	if t.spView != spViewNone {
		return t.appendSPView(dst, seg, first, sc)
	}
	if !ascii || !t.asciiStable {
		seg = t.normalizeState(seg, ascii, sc)
	}
	if t.normTrie.empty() {
		return t.appendPreTokenized(dst, seg, first, sc)
	}
	prev := 0
	for {
		m, ok := t.normTrie.find(seg, prev, prev, &sc.addedMemo[1])
		if !ok {
			break
		}
		if m.start > prev {
			dst = t.appendPreTokenized(dst, seg[prev:m.start], first && prev == 0, sc)
		}
		dst = append(dst, m.tok.ID)
		prev = m.end
	}
	if prev < len(seg) {
		dst = t.appendPreTokenized(dst, seg[prev:], first && prev == 0, sc)
	}
	return dst
}

func (t *Tokenizer) appendPreTokenized(dst []int32, seg string, first bool, sc *state) []int32 {
	if t.model.charLevel && len(t.stages) == 0 {
		return t.appendSP(dst, seg, first, sc)
	}
	if k := t.fastScan; k != scanNone {
		if blockScanKind(k) { // both levels of a two-level scanner
			return t.appendBlocks(dst, seg, k, sc)
		}
		in := innerScan(k)
		if in == scanNone {
			return t.appendScanned(dst, seg, k, sc)
		}
		for len(seg) > 0 {
			n := scan(k, seg)
			dst = t.appendScanned(dst, seg[:n], in, sc)
			seg = seg[n:]
		}
		return dst
	}
	if len(t.stages) == 0 {
		if seg == "" {
			return dst
		}
		return t.appendPiece(dst, seg, sc)
	}
	return t.appendStaged(dst, seg, sc)
}

// appendScanned appends the ids of seg split by the one-level scanner k.
func (t *Tokenizer) appendScanned(dst []int32, seg string, k scanKind, sc *state) []int32 {
	byteID := &t.model.byteID
	words := &t.model.tables().words
	for len(seg) > 0 {
		n := scan(k, seg)
		p := seg[:n]
		// The common cases inline: one byte, or a short pre-token in the
		// first slot of its word-table probe.
		if n == 1 {
			if id := byteID[p[0]]; id >= 0 {
				dst = append(dst, id)
				seg = seg[1:]
				continue
			}
		} else if n <= 16 && len(seg) >= 16 {
			a, b := shortKey(load64(seg, 0), load64(seg, 8), n)
			seg = seg[n:]
			if id, ok := words.home(a, b, n); ok {
				dst = append(dst, id)
			} else {
				dst = t.appendShort(dst, p, a, b, sc, false)
			}
			continue
		}
		seg = seg[n:]
		dst = t.appendPiece(dst, p, sc)
	}
	return dst
}

// appendBlocks appends the ids of text split by the block scanner for k
// (blockScanKind). Its inner loop, takeWords, takes the pre-tokens whose
// ends the masks give, from pos's block on through the blocks of the
// scanner's run (the masks of up to runBlocks blocks, computed together),
// those that cross from one block to the next too, while they are in the
// word table (in the first slot of their probe, for the few of 13 to 16
// bytes; single bytes too: a byte with an id is a word of the table, and
// one branch on the length, which text makes unpredictable, is gone): it
// calls nothing and writes ids into dst's spare capacity. It stops at the
// first pre-token it does not find, at an unknown start and at the run's
// end. A short pre-token it did not find goes to appendShort (the cache's
// slots, BPE; the whole probe for one of 13 to 16 bytes). The pre-tokens
// takeWords is not given (near the end of a text whose next 15 bytes may
// not be read, or with no spare capacity) and the one that runs past the
// block when takeWords did not take it go to appendSpan, with their ends
// from the masks; anything else (an unknown end, a pre-token of more than
// 16 bytes) to one step of the general path, blockStep.
func (t *Tokenizer) appendBlocks(dst []int32, text string, k scanKind, sc *state) []int32 {
	bs := &sc.blocks
	bs.reset(text, k)
	words := &t.model.tables().words
	// The last start from which takeWords may read a key's 16 bytes: 16
	// bytes before the text's end, or the end itself where the 15 bytes
	// past it may be read (overreads).
	end := len(text) - 16
	if overreads(text) {
		end = len(text)
	}
	pos := 0
	for pos < len(text) {
		base := pos &^ 63
		if base != bs.base {
			bs.load(base)
		}
		// The starts after pos before the first unknown one; takeWords
		// takes the pre-tokens that end at them.
		above := ^uint64(0) << (pos & 63) << 1
		u := bs.unknown & above
		m := bs.starts & above & (u&-u - 1)
		known := m
		// The blocks after pos's that takeWords may go on into: those of
		// the scanner's run whose starts are known to the first unknown,
		// up to the one that holds the last start from which a key's 16
		// bytes may be read (its starts masked to it: last), and with
		// room for 64 ids a block in dst; else append's growth, in
		// blockStep.
		room := cap(dst) - len(dst)
		lim := end - base // the last start that may be read, from base
		var run [][2]uint64
		last := ^uint64(0)
		if room < 64 {
			m = 0
		} else if lim < 63 {
			if pos-base > lim {
				m = 0
			}
			m &= 2<<max(lim, 0) - 1
		} else if u == 0 {
			i := (base - bs.runBase) >> 6
			n := min(bs.runN-1-i, lim>>6, room>>6-1) // blocks after pos's
			run = bs.run[i+1 : i+1+n]
			if lim>>6 == n {
				last = 2<<(lim&63) - 1
			}
		}
		var j, mb int
		pos, m, mb, j = takeWords(words, text, base, pos, m, u, run, last, dst[len(dst):cap(dst)])
		dst = dst[:len(dst)+j]
		if m != 0 {
			if n := mb + bits.TrailingZeros64(m) - pos; n <= 16 {
				// Not in the word table (past the first slot of its probe,
				// for 13 to 16 bytes).
				if len(text) < 16 { // keyAt reads 16 bytes of text
					dst = t.appendPiece(dst, text[pos:pos+n], sc)
				} else {
					a, b := keyAt(text, pos, n)
					dst = t.appendShort(dst, text[pos:pos+n], a, b, sc, true)
				}
				pos += n
				continue
			}
		} else if mb != base && j > 0 {
			// All taken, into a block after: go on from there.
			continue
		} else {
			// The pre-tokens takeWords was not given (near the end of the
			// text, or no room in dst) end at the known starts after pos.
			for m = known &^ (2<<(pos&63) - 1); m != 0; m &= m - 1 {
				e := base + bits.TrailingZeros64(m)
				dst = t.appendSpan(dst, text, pos, e, sc)
				pos = e
			}
			if u == 0 && pos < len(text) {
				// No start after pos in the block: its pre-token runs past.
				e := bs.past(pos)
				dst = t.appendSpan(dst, text, pos, e, sc)
				pos = e
				continue
			}
		}
		if pos < len(text) {
			dst, pos = t.blockStep(dst, text, pos, bs, sc)
		}
	}
	bs.s = "" // an idle state keeps no text alive
	return dst
}

// blockStep appends the ids of the pre-token at text[pos] (a start), which
// appendBlocks' inner loop did not take, and returns its end.
func (t *Tokenizer) blockStep(dst []int32, text string, pos int, bs *blockScanner, sc *state) ([]int32, int) {
	e := bs.next(pos)
	return t.appendSpan(dst, text, pos, e, sc), e
}

// appendSpan appends the ids of the pre-token text[pos:e].
func (t *Tokenizer) appendSpan(dst []int32, text string, pos, e int, sc *state) []int32 {
	n := e - pos
	p := text[pos:e]
	if n == 1 {
		if id := t.model.byteID[p[0]]; id >= 0 {
			return append(dst, id)
		}
	}
	if n > 16 || len(text) < 16 {
		return t.appendPiece(dst, p, sc)
	}
	a, b := keyAt(text, pos, n)
	if id, ok := t.model.tables().words.home(a, b, n); ok {
		return append(dst, id)
	}
	return t.appendShort(dst, p, a, b, sc, false)
}

// keyAt is shortKey of text[pos:pos+n] (n <= 16 <= len(text)), also near
// the end of text, where the 16 bytes from pos are not all there: then the
// last 16 bytes are read and shifted.
func keyAt(text string, pos, n int) (a, b uint64) {
	if pos+16 <= len(text) {
		return shortKey(load64(text, pos), load64(text, pos+8), n)
	}
	w0, w1 := load64(text, len(text)-16), load64(text, len(text)-8)
	sh := uint(pos-(len(text)-16)) * 8 // 8 to 120
	if sh >= 64 {
		w0, w1 = w1>>(sh-64), 0
	} else {
		w0, w1 = w0>>sh|w1<<(64-sh), w1>>sh
	}
	return shortKey(w0, w1, n)
}

// appendShort appends the ids of p (at most 16 bytes; a, b its key): from
// the model's word table, else (a model without one) the cache's front
// table, else the cache's slots, else by BPE, then cached. probed is true
// where the word table's whole probe of p has found it absent (takeWords
// probes a key of up to shortWord bytes to its first empty slot).
func (t *Tokenizer) appendShort(dst []int32, p string, a, b uint64, sc *state, probed bool) []int32 {
	m := &t.model
	var hs *hotSlot
	if words := &m.tables().words; words.n > 0 {
		if !probed || len(p) > shortWord {
			if id, ok := words.find(a, b, len(p)); ok {
				return append(dst, id)
			}
		}
	} else {
		var ok bool
		if hs, ok = sc.cache.hotFind(a, b, len(p)); ok {
			return append(dst, hs.id)
		}
	}
	h := sc.cache.finish(a, b, len(p))
	dst, ok := sc.cache.getSlot(dst, p, h, a, b, hs)
	if ok {
		return dst
	}
	start := len(dst)
	if m.words.n > 0 {
		// not in the word table: BPE is not the vocabulary's id alone
		dst = m.appendMerged(dst, p, &sc.scratch)
	} else {
		dst = m.appendBPE(dst, p, &sc.scratch)
	}
	sc.cache.put(p, h, a, b, dst[start:])
	return dst
}

// appendStaged runs the pre-tokenizer stages one after the other over all
// pieces, then the model over each.
func (t *Tokenizer) appendStaged(dst []int32, seg string, sc *state) []int32 {
	pieces := []string{seg}
	var next []string
	var spans []span
	for _, st := range t.stages {
		next = next[:0]
		for _, p := range pieces {
			switch {
			case st.prefixSpace:
				if len(p) == 0 || p[0] != ' ' {
					p = " " + p
				}
				next = append(next, p)
			case st.digits:
				next = appendDigitPieces(next, p, st.individual)
			case st.re != nil:
				spans = st.re.appendSpans(spans[:0], p)
				for _, s := range spans {
					next = append(next, p[s.start:s.end])
				}
			default:
				next = appendScanPieces(next, st.scan, p)
			}
		}
		pieces, next = next, pieces
	}
	for _, p := range pieces {
		if p != "" {
			dst = t.appendPiece(dst, p, sc)
		}
	}
	return dst
}

// appendPiece appends the BPE ids of one pre-token.
func (t *Tokenizer) appendPiece(dst []int32, p string, sc *state) []int32 {
	m := &t.model
	if len(p) == 1 {
		if id := m.byteID[p[0]]; id >= 0 {
			return append(dst, id)
		}
	}
	if len(p) <= 16 {
		a, b := keyOf(p)
		return t.appendShort(dst, p, a, b, sc, false)
	}
	if len(p) > maxCachedLen {
		return m.appendBPE(dst, p, &sc.scratch)
	}
	h, a, b := sc.cache.hash(p)
	dst, ok := sc.cache.getSlot(dst, p, h, a, b, nil)
	if ok {
		return dst
	}
	start := len(dst)
	dst = m.appendBPE(dst, p, &sc.scratch)
	sc.cache.put(p, h, a, b, dst[start:])
	return dst
}

// EncodeBatch encodes texts on threads goroutines (GOMAXPROCS when threads
// <= 0) and returns their ids in the order of texts.
func (t *Tokenizer) EncodeBatch(texts []string, addSpecial bool, threads int) [][]int32 {
	out := make([][]int32, len(texts))
	if threads <= 0 {
		threads = runtime.GOMAXPROCS(0)
	}
	const chunk = 64
	threads = min(threads, (len(texts)+chunk-1)/chunk)
	var next atomic.Int64
	work := func() {
		ses := t.Session()
		defer ses.Close()
		var buf []int32
		for {
			lo := int(next.Add(chunk)) - chunk
			if lo >= len(texts) {
				return
			}
			for i := lo; i < min(lo+chunk, len(texts)); i++ {
				if cap(buf)-len(buf) < len(texts[i])+8 {
					buf = make([]int32, 0, max(1<<16, len(texts[i])+8))
				}
				if i+1 < len(texts) {
					ses.Prefetch(texts[i+1])
				}
				start := len(buf)
				buf = ses.AppendEncode(buf, texts[i], addSpecial)
				out[i] = buf[start:len(buf):len(buf)]
			}
		}
	}
	if threads <= 1 {
		work()
		return out
	}
	var wg sync.WaitGroup
	for range threads {
		wg.Go(work)
	}
	wg.Wait()
	return out
}

// Decode returns the text of ids, as HF tokenizers' decode: ids that do not
// exist are skipped, special added tokens too with skipSpecial, and invalid
// UTF-8 (a sequence cut inside a character) becomes U+FFFD.
func (t *Tokenizer) Decode(ids []int32, skipSpecial bool) string {
	if !t.fastDecode && !t.joinDecode {
		var toks []string
		for _, id := range ids {
			if id >= 0 && int(id) < len(t.tokens) && t.isToken[id] && !(skipSpecial && t.isSpecial[id]) {
				toks = append(toks, t.tokens[id])
			}
		}
		return t.decodeChain(toks)
	}
	var b []byte
	for _, id := range ids {
		if id < 0 || int(id) >= len(t.tokens) || !t.isToken[id] {
			continue
		}
		if skipSpecial && t.isSpecial[id] {
			continue
		}
		if t.joinDecode {
			if len(b) > 0 {
				b = append(b, ' ')
			}
			b = append(b, t.tokens[id]...)
			continue
		}
		b = append(b, t.decoded[id]...)
	}
	return string(appendLossy(make([]byte, 0, len(b)), b))
}

// isASCII reports whether s is all ASCII.
func isASCII(s string) bool { return classify.ASCIILen(s) == len(s) }
