package tokenize

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

	"github.com/ferryml/ferry/tokenize/internal/bytestr"
)

// This file holds what SentencePiece-style BPE tokenizers (Llama-2,
// TinyLlama, Mistral, Phi-3) need inside a tokenizer.json: the Prepend and
// Replace normalizers, the Metaspace pre-tokenizer, a character-level BPE
// model with byte_fallback, and the Replace, ByteFallback, Fuse and Strip
// decoders.

// sym is SentencePiece's word boundary mark, U+2581 LOWER ONE EIGHTH BLOCK.
const sym = "\u2581"

// normStep is one normalizer: a Unicode normalization form, Prepend or
// Replace (of a literal string).
type normStep struct {
	form     norm.Form
	isForm   bool
	prepend  string
	replace  bool
	from, to string
}

type prependScheme uint8

const (
	prependAlways prependScheme = iota
	prependFirst
	prependNever
)

// metaspace is HF's Metaspace pre-tokenizer: spaces become repl, repl is
// put in front (always, or only for the text's first piece, or never)
// unless the piece starts with it, and with split each repl starts a new
// pre-token.
type metaspace struct {
	repl   string
	scheme prependScheme
	split  bool
}

// normalize applies the normalizer to s. ascii says s is ASCII, which the
// Unicode forms leave as it is.
func (t *Tokenizer) normalize(s string) string {
	return t.normalizeASCII(s, false)
}

func (t *Tokenizer) normalizeASCII(s string, ascii bool) string {
	for _, n := range t.norms {
		switch {
		case n.isForm:
			if !ascii {
				s = normalizeLikeHF(n.form, s)
			}
		case n.replace:
			s = strings.ReplaceAll(s, n.from, n.to)
		case s != "":
			s = n.prepend + s
		}
	}
	return s
}

// normalizeState is normalizeASCII with Prepend and Replace written into the
// state's two scratch buffers (in turn: a step reads the other's output), so
// that a warm call does not allocate. The result aliases a buffer: it is
// valid until the next call with sc, and must not be kept.
func (t *Tokenizer) normalizeState(s string, ascii bool, sc *state) string {
	k := 0
	for _, n := range t.norms {
		switch {
		case n.isForm:
			if !ascii {
				s = normalizeLikeHF(n.form, s)
			}
			continue
		case n.replace:
			if !strings.Contains(s, n.from) {
				continue
			}
			b := sc.nbuf[k][:0]
			for {
				i := strings.Index(s, n.from)
				if i < 0 {
					break
				}
				b = append(append(b, s[:i]...), n.to...)
				s = s[i+len(n.from):]
			}
			sc.nbuf[k] = append(b, s...)
		case s != "":
			sc.nbuf[k] = append(append(sc.nbuf[k][:0], n.prepend...), s...)
		default:
			continue
		}
		s = bytestr.String(sc.nbuf[k])
		k ^= 1
	}
	return s
}

// initCharLevel fills the byte_fallback table and decides whether words may
// be cut before each run of "▁" (see appendWords).
func (m *bpeModel) initCharLevel() {
	for b := range m.fallbackID {
		m.fallbackID[b] = -1
		if id, ok := m.vocab.get(fmt.Sprintf("<0x%02X>", b)); ok {
			m.fallbackID[b] = id
		}
	}
	// No token holds "▁" after another character: then no merge joins the
	// symbols on either side of such a place, and BPE over the pieces is
	// BPE over the whole. ignore_merges looks the whole word up, so it
	// needs the whole word.
	m.symCut = !m.ignoreMerges
	m.vocab.all(func(tok string, _ int32) bool {
		rest := strings.TrimLeft(tok, sym)
		if strings.Contains(rest, sym) {
			m.symCut = false
			return false
		}
		return true
	})
}

// initialChars is initial for a character-level vocabulary, as HF's BPE
// merge_word: each character is its token; else, with byte_fallback, its
// UTF-8 bytes as <0xNN> tokens when all exist; else unk, a run of which is
// one unk with fuse_unk. A pending unk is written when the next character
// with a token comes (byte_fallback tokens do not flush it, as in HF).
func (m *bpeModel) initialChars(sc *scratch, word string) []int32 {
	ids := sc.ids[:0]
	pending := false
	for i := 0; i < len(word); {
		var id int32 = -1
		n := 1
		if c := word[i]; c < utf8.RuneSelf {
			id = m.byteID[c]
		} else {
			_, n = utf8.DecodeRuneInString(word[i:])
			if v, ok := m.vocab.get(word[i : i+n]); ok {
				id = v
			}
		}
		ch := word[i : i+n]
		i += n
		if id >= 0 {
			if pending {
				ids = append(ids, m.unkID)
				pending = false
			}
			ids = append(ids, id)
			continue
		}
		if m.byteFallback && m.hasFallback(ch) {
			for k := 0; k < len(ch); k++ {
				ids = append(ids, m.fallbackID[ch[k]])
			}
			continue
		}
		if m.unkID < 0 {
			continue
		}
		if pending && !m.fuseUnk {
			ids = append(ids, m.unkID)
		}
		pending = true
	}
	if pending {
		ids = append(ids, m.unkID)
	}
	sc.ids = ids
	return ids
}

func (m *bpeModel) hasFallback(ch string) bool {
	for k := 0; k < len(ch); k++ {
		if m.fallbackID[ch[k]] < 0 {
			return false
		}
	}
	return true
}

// spView says how a SentencePiece-style tokenizer may encode its text
// without writing the normalized text out: spaces are read as "▁" (the
// model maps both to the id of "▁") and the "▁" put in front is a flag.
type spViewKind uint8

const (
	spViewNone spViewKind = iota
	spViewNorm            // normalizer Replace(" ", "▁"), maybe Prepend("▁"); no pre-tokenizer
	spViewMeta            // no normalizer; Metaspace("▁", split=false)
)

// initSPView decides t.spView. It needs symCut (words are cut before "▁"
// runs), no normalized added tokens (those are matched in the written-out
// text) and "▁" in the vocabulary.
func (t *Tokenizer) initSPView() {
	m := &t.model
	symID, ok := m.vocab.get(sym)
	if !m.charLevel || !m.symCut || !ok || !t.normTrie.empty() || len(t.stages) > 0 {
		return
	}
	prepend, replace := false, false
	for _, n := range t.norms {
		switch {
		case n.isForm:
			return
		case n.replace:
			if n.from != " " || n.to != sym || replace {
				return
			}
			replace = true
		default:
			if n.prepend != sym || prepend {
				return
			}
			prepend = true
		}
	}
	switch {
	case t.meta != nil:
		if len(t.norms) > 0 || t.meta.repl != sym || t.meta.split {
			return
		}
		t.spView = spViewMeta
	case replace:
		t.spView, t.spPrepend = spViewNorm, prepend
	default:
		return
	}
	m.byteID[' '] = symID
	m.symID = symID
}

// appendSPView encodes a segment of the text (between added tokens) in the
// spView way. first says it starts the text.
func (t *Tokenizer) appendSPView(dst []int32, seg string, first bool, sc *state) []int32 {
	if seg == "" {
		return dst
	}
	var prefix bool
	if t.spView == spViewNorm {
		prefix = t.spPrepend
	} else {
		ms := t.meta
		prefix = (ms.scheme == prependAlways || ms.scheme == prependFirst && first) &&
			seg[0] != ' ' && !strings.HasPrefix(seg, sym)
	}
	for len(seg) > 0 {
		i := 0
		for i < len(seg) {
			if seg[i] == ' ' {
				i++
			} else if seg[i] == sym[0] && strings.HasPrefix(seg[i:], sym) {
				i += len(sym)
			} else {
				break
			}
		}
		k := nextSym(seg, i)
		w := seg[:k]
		seg = seg[k:]
		if prefix {
			dst = t.appendPrefixed(dst, w, sc)
			prefix = false
			continue
		}
		dst = t.appendPiece(dst, w, sc)
	}
	return dst
}

// nextSym returns the index of the first space or "▁" in s at or after i,
// or len(s).
func nextSym(s string, i int) int {
	for ; i < len(s); i++ {
		if c := s[i]; c == ' ' || c == sym[0] && strings.HasPrefix(s[i:], sym) {
			return i
		}
	}
	return i
}

// appendPrefixed appends the ids of "▁" + w, cached apart from the other
// words (keyed by w).
func (t *Tokenizer) appendPrefixed(dst []int32, w string, sc *state) []int32 {
	m := &t.model
	if len(w) > maxCachedLen {
		return m.appendBPEPrefixed(dst, w, &sc.scratch)
	}
	if sc.pcache == nil {
		sc.pcache = newPTCache()
	}
	c := sc.pcache
	h, a, b := c.hash(w)
	dst, ok := c.get(dst, w, h, a, b)
	if ok {
		return dst
	}
	start := len(dst)
	dst = m.appendBPEPrefixed(dst, w, &sc.scratch)
	c.put(w, h, a, b, dst[start:])
	return dst
}

// appendBPEPrefixed is appendBPE of "▁" + word for a character-level model.
func (m *bpeModel) appendBPEPrefixed(dst []int32, word string, sc *scratch) []int32 {
	ids := m.initialChars(sc, word)
	ids = append(ids, 0)
	copy(ids[1:], ids)
	ids[0] = m.symID
	sc.ids = ids
	if len(ids) >= heapThreshold {
		return m.mergeHeap(dst, ids, sc)
	}
	return m.mergeSmall(dst, ids, "", sc)
}

// appendSP encodes one normalized piece of a tokenizer without a byte-level
// pre-tokenizer: Metaspace, if any, then the model over each word. first
// says the piece starts the text (Metaspace's prepend_scheme "first").
func (t *Tokenizer) appendSP(dst []int32, seg string, first bool, sc *state) []int32 {
	if seg == "" {
		return dst
	}
	ms := t.meta
	if ms == nil {
		return t.appendWords(dst, seg, sc)
	}
	seg = strings.ReplaceAll(seg, " ", ms.repl)
	if (ms.scheme == prependAlways || ms.scheme == prependFirst && first) && !strings.HasPrefix(seg, ms.repl) {
		seg = ms.repl + seg
	}
	if !ms.split {
		return t.appendWords(dst, seg, sc)
	}
	// Each repl starts a pre-token (MergedWithNext).
	for len(seg) > 0 {
		k := 0
		if strings.HasPrefix(seg, ms.repl) {
			k = len(ms.repl)
		}
		j := strings.Index(seg[k:], ms.repl)
		if j < 0 {
			return t.appendPiece(dst, seg, sc)
		}
		dst = t.appendPiece(dst, seg[:k+j], sc)
		seg = seg[k+j:]
	}
	return dst
}

// appendWords runs the model over seg, one word at a time where that gives
// the same ids (symCut): a word is a run of "▁" and what follows up to the
// next "▁". Words are short, so they hit the pre-token cache.
func (t *Tokenizer) appendWords(dst []int32, seg string, sc *state) []int32 {
	if !t.model.symCut {
		return t.appendPiece(dst, seg, sc)
	}
	for len(seg) > 0 {
		i := 0
		for strings.HasPrefix(seg[i:], sym) {
			i += len(sym)
		}
		k := indexSym(seg[i:])
		if k < 0 {
			return t.appendPiece(dst, seg, sc)
		}
		dst = t.appendPiece(dst, seg[:i+k], sc)
		seg = seg[i+k:]
	}
	return dst
}

// indexSym is strings.Index(s, sym) for the next word's start, a few bytes
// on: IndexByte and a compare cost less than Index's general search.
func indexSym(s string) int {
	for i := 0; i < len(s); i++ {
		j := strings.IndexByte(s[i:], sym[0])
		if j < 0 {
			break
		}
		i += j
		if strings.HasPrefix(s[i:], sym) {
			return i
		}
	}
	return -1
}

// decKind names a decoder.
type decKind uint8

const (
	decByteLevel decKind = iota
	decReplace
	decByteFallback
	decFuse
	decStrip
)

// decStep is one decoder of the decoder chain.
type decStep struct {
	kind        decKind
	from, to    string // Replace
	char        rune   // Strip
	start, stop int    // Strip
}

// decodeChain is HF's Decoder::decode: each decoder's decode_chain in turn
// over the token strings, then their concatenation.
func (t *Tokenizer) decodeChain(toks []string) string {
	for _, st := range t.decSteps {
		switch st.kind {
		case decByteLevel:
			var b []byte
			for _, tok := range toks {
				b, _ = appendByteLevelDecode(b, tok)
			}
			toks = []string{string(appendLossy(nil, b))}
		case decReplace:
			for i, tok := range toks {
				toks[i] = strings.ReplaceAll(tok, st.from, st.to)
			}
		case decByteFallback:
			toks = decodeByteFallback(toks)
		case decFuse:
			toks = []string{strings.Join(toks, "")}
		case decStrip:
			for i, tok := range toks {
				toks[i] = stripChars(tok, st.char, st.start, st.stop)
			}
		}
	}
	return strings.Join(toks, "")
}

// decodeByteFallback turns each run of <0xNN> tokens into the string of
// their bytes, or into one U+FFFD per byte when those are not valid UTF-8.
func decodeByteFallback(toks []string) []string {
	out := toks[:0:0]
	var run []byte
	flush := func() {
		if len(run) == 0 {
			return
		}
		if utf8.Valid(run) {
			out = append(out, string(run))
		} else {
			for range run {
				out = append(out, "\ufffd")
			}
		}
		run = run[:0]
	}
	for _, tok := range toks {
		if len(tok) == 6 && strings.HasPrefix(tok, "<0x") && tok[5] == '>' {
			hex := tok[3:5]
			if hex[0] == '+' { // Rust's from_str_radix takes a sign
				hex = hex[1:]
			}
			if v, err := strconv.ParseUint(hex, 16, 8); err == nil {
				run = append(run, byte(v))
				continue
			}
		}
		flush()
		out = append(out, tok)
	}
	flush()
	return out
}

// stripChars removes up to start leading and stop trailing c from s.
func stripChars(s string, c rune, start, stop int) string {
	for k := 0; k < start; k++ {
		r, n := utf8.DecodeRuneInString(s)
		if n == 0 || r != c {
			break
		}
		s = s[n:]
	}
	for k := 0; k < stop; k++ {
		r, n := utf8.DecodeLastRuneInString(s)
		if n == 0 || r != c {
			break
		}
		s = s[:len(s)-n]
	}
	return s
}
