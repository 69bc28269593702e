package tokenize

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferryml/ferry/tokenize/internal/le"
)

// The compiled cache. Most of Load's time goes into the model's vocab and
// merges: reading them from JSON and resolving 150,000-280,000 merges to
// ids through string lookups. Load keeps what it builds from them (the
// tables below) in a file named after the SHA-256 of the tokenizer file's
// bytes, and a later Load of the same bytes reads the tables back with no
// parsing and no string hashing; the rest of tokenizer.json (normalizer,
// pre-tokenizer, added tokens, post-processor, decoder: a few kilobytes) is
// stored beside them and parsed as usual, so there is one code path for it.
//
// The file is untrusted: it is read only when its magic, version, the
// SHA-256 of the source it names, the CRC-32C of its body and every length,
// offset and id in it check out; anything else (a stale, truncated or
// corrupt file, an unreadable or read-only directory) makes Load parse
// tokenizer.json and, where it can, write the file again. Writes go to a
// temporary file renamed into place, so readers never see half a file, and
// a file once written never changes: Load maps it read-only and uses its
// tables where they lie, for as long as the process lives (nothing is
// copied or decoded, and the strings of tokens point into it). The source
// index (readIndex) only lets Load read the file while it hashes the
// source: what it names is checked the same way.
//
// Layout (all integers little-endian; the tables are used in place where
// the machine is little-endian, see internal/le):
//
//	offset size
//	0      8    magic "FERRYTOK"
//	8      4    version (compiledVersion)
//	12     4    0
//	16     32   SHA-256 of the source file's bytes as stored (tokenizer.json or .zst)
//	48     32   SHA-256 of the decompressed tokenizer.json (Tokenizer.SHA256)
//	80     8    body length
//	88     4    CRC-32C (Castagnoli) of the body
//	92     4    CRC-32C of bytes 0-91
//	96     body: sections, each a u64 length, that many bytes, and zeros to the
//	       next multiple of 8, in this order:
//	       rest       tokenizer.json with model.vocab and model.merges replaced by null
//	       scalars    8 u32: vocabSize, nIDs, unkID (-1: none), flags (1 charLevel,
//	                  2 symCut, 4 selfBPE), vocab index shift, vocab index count, merge table shift,
//	                  merge table idBits | placeBits<<8
//	       tokEnds    nIDs+1 u32: id's token (as in tokenizer.json) is tokArena[tokEnds[id]:tokEnds[id+1]]
//	       tokArena   the tokens, concatenated
//	       keyEnds    nIDs+1 u32, and
//	       keys       each id's decoded bytes (the vocabulary index's keys)
//	       idFlags    nIDs bytes: 1 the id exists, 2 not a byte-level string (oddTokens),
//	                  4 selfBPE[id]
//	       vocabSlots u64 each: tag<<32 | id, 0 empty
//	       byteID     256 i32
//	       fallbackID 256 i32
//	       mergeSlots u64 each: 1<<63 | (left<<idBits | right)<<(63-2*idBits) | val; 0 empty
//	                  (mergeTable: val is the merge's order, merged<<placeBits | place,
//	                  or an index into mergeSide)
//	       mergeSide  u32 each: merged ids in rank order, or none (mergeTable.side)
//	       bytePairs  0 or 65,536 u64
//	       wordSlots  u64 pairs: key a, key b | len(key)+1<<32 | id<<40; second word 0
//	                  empty (the model's wordTable: keys of 1 to 12 bytes; 16 empty
//	                  slots for a character-level model)
//	       wordLong   u64 triples: key a, key b, len(key)+1 | id<<32; third word 0
//	                  empty (the wordTable's keys of 13 to 16 bytes; at least 16 slots)
//
// compiledVersion changes whenever the layout, or what Load builds into
// these tables, changes: a file of another version is not read.
const (
	compiledMagic   = "FERRYTOK"
	compiledVersion = 5
	compiledHeader  = 96
	// maxCompiledSize bounds the cache file read (the largest real one,
	// gpt-oss's, is about 27 MB; Qwen2.5's 13 MB, Llama-3.1's 14 MB).
	maxCompiledSize = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// cacheDir returns the directory of compiled tokenizers, "" when caching is
// off: $FERRY_TOKENIZER_CACHE when set ("off" turns the cache off), else
// $FERRY_CACHE/tokenize, else ~/.cache/ferry/tokenize.
func cacheDir() string {
	switch v := os.Getenv("FERRY_TOKENIZER_CACHE"); v {
	case "off":
		return ""
	case "":
	default:
		return v
	}
	if c := os.Getenv("FERRY_CACHE"); c != "" {
		return filepath.Join(c, "tokenize")
	}
	home, err := os.UserHomeDir()
	if err != nil || home == "" {
		return ""
	}
	return filepath.Join(home, ".cache", "ferry", "tokenize")
}

// compiledName is the cache file name for a source of SHA-256 key.
func compiledName(key [32]byte) string {
	return fmt.Sprintf("%s.v%d.ferrytok", hex.EncodeToString(key[:]), compiledVersion)
}

// staleTemp is the age past which a temporary file of writeCompiled is a
// crashed writer's, not one still being written.
const staleTemp = time.Hour

// removeStale removes what an entry of key made before the one just
// written to dir leaves there: its files of older versions, which no build
// of this version reads again (a newer version's file is a newer build's,
// and stays), and temporary files of crashed writers. Errors are ignored:
// the cache is an optimisation.
func removeStale(dir string, key [32]byte) {
	prefix := hex.EncodeToString(key[:]) + ".v"
	names, _ := filepath.Glob(filepath.Join(dir, prefix+"*"))
	for _, name := range names {
		base := filepath.Base(name)
		v, rest, _ := strings.Cut(base[len(prefix):], ".")
		n, err := strconv.Atoi(v)
		switch {
		case err != nil || n < 0:
		case rest == "ferrytok" && n < compiledVersion:
			os.Remove(name)
		case strings.HasPrefix(rest, "ferrytok.tmp-"):
			removeOldTemp(name)
		}
	}
}

// removeOldTemp removes the temporary file name of writeCompiled when it
// is a crashed writer's: older than staleTemp.
func removeOldTemp(name string) {
	if st, err := os.Lstat(name); err == nil && time.Since(st.ModTime()) > staleTemp {
		os.Remove(name)
	}
}

// modelTables is what parseModel builds from the model's vocab and merges
// (and finish the byte pairs from them), before the added tokens change
// tokens and decoded: what the compiled cache stores.
type modelTables struct {
	vocabSize          int
	unkID              int32
	charLevel, symCut  bool
	tokens             []string
	decoded            []string // vocab.key(id); set when read from the cache
	isToken            []bool
	oddIDs             []int32 // the ids of Tokenizer.oddTokens
	vocab              vocabIndex
	byteID, fallbackID [256]int32
	merges             mergeTable
	bytePairs          []uint64
	selfBPE            []bool
	words              wordTable
}

// snapshotTables copies the tables right after parseModel.
func (t *Tokenizer) snapshotTables() *modelTables {
	bm := &t.model
	mt := &modelTables{vocabSize: t.vocabSize, unkID: bm.unkID, charLevel: bm.charLevel, symCut: bm.symCut,
		tokens: slices.Clone(t.tokens), isToken: slices.Clone(t.isToken),
		vocab: bm.vocab, byteID: bm.byteID, fallbackID: bm.fallbackID, merges: bm.merges}
	for _, id := range t.oddTokens {
		mt.oddIDs = append(mt.oddIDs, id)
	}
	return mt
}

// installTables is parseModel's work done from a compiled cache: the
// tables are t's and t.model's.
func (t *Tokenizer) installTables(mt *modelTables) error {
	bm := &t.model
	if mt.charLevel != bm.charLevel {
		return corrupt("compiled", "the model is character-level: %v, the pre-tokenizer says %v", mt.charLevel, bm.charLevel)
	}
	t.vocabSize = mt.vocabSize
	bm.unkID, bm.symCut = mt.unkID, mt.symCut
	bm.vocab, bm.byteID, bm.fallbackID, bm.merges, bm.bytePairs = mt.vocab, mt.byteID, mt.fallbackID, mt.merges, mt.bytePairs
	bm.selfBPE, bm.words = mt.selfBPE, mt.words
	t.tokens, t.decoded, t.isToken = mt.tokens, mt.decoded, mt.isToken
	t.oddTokens = make(map[string]int32, len(mt.oddIDs))
	for _, id := range mt.oddIDs {
		t.oddTokens[t.tokens[id]] = id
	}
	return nil
}

// appendCompiled appends the compiled form of a tokenizer: src is the
// SHA-256 of the source file, sha the hex SHA-256 of tokenizer.json, rest
// the document without the model's tables.
func appendCompiled(dst []byte, src [32]byte, sha string, rest []byte, mt *modelTables) []byte {
	le := binary.LittleEndian
	sum, err := hex.DecodeString(sha)
	if err != nil || len(sum) != 32 {
		panic("tokenize: bad sha " + sha)
	}
	start := len(dst)
	dst = append(dst, compiledMagic...)
	dst = le.AppendUint32(dst, compiledVersion)
	dst = le.AppendUint32(dst, 0)
	dst = append(dst, src[:]...)
	dst = append(dst, sum...)
	dst = append(dst, make([]byte, 16)...) // body length and the CRCs, below
	body := len(dst)
	var end int
	section := func(n int) { // a section of n bytes follows
		dst = le.AppendUint64(dst, uint64(n))
		end = len(dst) + n
	}
	pad := func() {
		if len(dst) != end {
			panic("tokenize: compiled section length")
		}
		for (len(dst)-start)%8 != 0 {
			dst = append(dst, 0)
		}
	}
	u32s := func(v []uint32) {
		section(4 * len(v))
		for _, x := range v {
			dst = le.AppendUint32(dst, x)
		}
		pad()
	}
	u64s := func(v []uint64) {
		section(8 * len(v))
		for _, x := range v {
			dst = le.AppendUint64(dst, x)
		}
		pad()
	}
	section(len(rest))
	dst = append(dst, rest...)
	pad()
	var flags uint32
	if mt.charLevel {
		flags |= 1
	}
	if mt.symCut {
		flags |= 2
	}
	if mt.selfBPE != nil {
		flags |= 4
	}
	u32s([]uint32{uint32(mt.vocabSize), uint32(len(mt.tokens)), uint32(mt.unkID), flags,
		uint32(mt.vocab.shift), uint32(mt.vocab.n), uint32(mt.merges.shift), uint32(mt.merges.idBits) | uint32(mt.merges.placeBits)<<8})
	ends := make([]uint32, len(mt.tokens)+1)
	size := 0
	for id, tok := range mt.tokens {
		size += len(tok)
		ends[id+1] = uint32(size)
	}
	u32s(ends)
	section(size)
	for _, tok := range mt.tokens {
		dst = append(dst, tok...)
	}
	pad()
	u32s(mt.vocab.ends)
	section(len(mt.vocab.keys))
	dst = append(dst, mt.vocab.keys...)
	pad()
	section(len(mt.tokens))
	flags0 := len(dst)
	for id := range mt.tokens {
		var f byte
		if mt.isToken[id] {
			f |= 1
		}
		if mt.selfBPE != nil && mt.selfBPE[id] {
			f |= 4
		}
		dst = append(dst, f)
	}
	for _, id := range mt.oddIDs {
		dst[flags0+int(id)] |= 2
	}
	pad()
	u64s(mt.vocab.slots)
	for _, ids := range []*[256]int32{&mt.byteID, &mt.fallbackID} {
		v := make([]uint32, 256)
		for i, id := range ids {
			v[i] = uint32(id)
		}
		u32s(v)
	}
	u64s(mt.merges.slots)
	u32s(mt.merges.side)
	u64s(mt.bytePairs)
	u64s(mt.words.slots)
	u64s(mt.words.long)
	h := dst[start : start+compiledHeader]
	le.PutUint64(h[80:], uint64(len(dst)-body))
	le.PutUint32(h[88:], crc32.Checksum(dst[body:], castagnoli))
	le.PutUint32(h[92:], crc32.Checksum(h[:92], castagnoli))
	return dst
}

// compiledReader reads the sections of a compiled body; the first error sticks.
type compiledReader struct {
	b    []byte
	off  int
	name string
	err  error
}

func (r *compiledReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = &CorruptError{Kind: ErrCorrupt, Path: r.name, Offset: int64(r.off), What: fmt.Sprintf(format, args...)}
	}
}

// section returns the next section, which must be n bytes long when n >= 0
// (and a multiple of unit), and skips its padding.
func (r *compiledReader) section(what string, n, unit int) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b)-r.off < 8 {
		r.fail("%s: want a section length, the file ends", what)
		return nil
	}
	size := binary.LittleEndian.Uint64(r.b[r.off:])
	left := uint64(len(r.b) - r.off - 8)
	switch {
	case size > left || (size+7)&^7 > left:
		r.fail("%s: section of %d bytes, %d left in the file", what, size, left)
		return nil
	case n >= 0 && size != uint64(n):
		r.fail("%s: section of %d bytes, want %d", what, size, n)
		return nil
	case size%uint64(unit) != 0:
		r.fail("%s: section of %d bytes, not a multiple of %d", what, size, unit)
		return nil
	}
	r.off += 8
	s := r.b[r.off : r.off+int(size) : r.off+int(size)]
	r.off += int(size+7) &^ 7
	return s
}

// ends reads a section of n+1 u32 ends into an arena: from 0, never
// decreasing (arena checks the last one).
func (r *compiledReader) ends(what string, n int) []uint32 {
	b := r.section(what, 4*(n+1), 4)
	if r.err != nil {
		return nil
	}
	ends := le.Uint32s(b)
	prev := uint32(0)
	bad := ends[0] != 0
	for _, e := range ends {
		bad = bad || e < prev
		prev = e
	}
	if bad {
		r.fail("%s: not ascending from 0", what)
	}
	return ends
}

// arena reads the section the ends index.
func (r *compiledReader) arena(what string, ends []uint32) string {
	b := r.section(what, -1, 1)
	if r.err != nil {
		return ""
	}
	if uint64(ends[len(ends)-1]) != uint64(len(b)) {
		r.fail("%s: %d bytes, the ends say %d", what, len(b), ends[len(ends)-1])
	}
	return le.String(b)
}

// tableShift checks that a table of n slots is a power of two from 16 and
// that shift is 64 - log2(n).
func (r *compiledReader) tableShift(what string, n int, shift uint32) uint {
	if n < 16 || n&(n-1) != 0 || uint(shift) != uint(64-bits.TrailingZeros(uint(n))) {
		r.fail("%s: %d slots with shift %d", what, n, shift)
	}
	return uint(shift)
}

// readCompiled reads a compiled tokenizer whose source has SHA-256 src; it
// fails with a *CorruptError (ErrCorrupt) on anything it does not expect.
// name is for the errors. A caller that keeps the Tokenizer starts its
// upgradeTables (startUpgrade).
func readCompiled(b []byte, src [32]byte, name string) (*Tokenizer, error) {
	le := binary.LittleEndian
	bad := func(off int, format string, args ...any) error {
		return &CorruptError{Kind: ErrCorrupt, Path: name, Offset: int64(off), What: fmt.Sprintf(format, args...)}
	}
	switch {
	case len(b) < compiledHeader:
		return nil, bad(0, "%d bytes, shorter than the %d-byte header", len(b), compiledHeader)
	case string(b[:8]) != compiledMagic:
		return nil, bad(0, "magic %q, want %q", b[:8], compiledMagic)
	case crc32.Checksum(b[:92], castagnoli) != le.Uint32(b[92:]):
		return nil, bad(92, "header checksum mismatch")
	case le.Uint32(b[8:]) != compiledVersion:
		return nil, bad(8, "version %d, want %d", le.Uint32(b[8:]), compiledVersion)
	case !bytes.Equal(b[16:48], src[:]):
		return nil, bad(16, "made from a source of SHA-256 %x, this one is %x (stale)", b[16:48], src)
	case le.Uint64(b[80:]) != uint64(len(b)-compiledHeader):
		return nil, bad(80, "body of %d bytes, the file has %d after the header", le.Uint64(b[80:]), len(b)-compiledHeader)
	}
	// The body's checksum is computed beside the reading of the body, which
	// checks everything it uses anyway (FuzzCompiled): a mismatch discards
	// what was read.
	sum := make(chan uint32, 1)
	go func() {
		// In pieces: the checksum's assembly cannot be preempted, and over
		// the whole body (megabytes) it would hold up a GC's stop-the-world,
		// and every goroutine with it, for milliseconds.
		c := uint32(0)
		for p := b[compiledHeader:]; len(p) > 0; {
			n := min(len(p), 128<<10)
			c, p = crc32.Update(c, castagnoli, p[:n]), p[n:]
		}
		sum <- c
	}()
	t, err := readCompiledBody(b[compiledHeader:], hex.EncodeToString(b[48:80]), name)
	if <-sum != le.Uint32(b[88:]) {
		return nil, bad(88, "body checksum mismatch")
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// startUpgrade starts upgradeTables on a Tokenizer that readCompiled
// returned, once its file is accepted: upgradeTables reads the tables in
// the file's memory, which Load unmaps when it refuses the file.
func (t *Tokenizer) startUpgrade() { t.model.upgrading.Go(t.model.upgradeTables) }

// readCompiledBody reads a body whose checksum checked out: every length,
// offset and id is still checked (FuzzCompiled feeds it bodies with valid
// checksums). The tables alias body, which must not change afterwards. sha
// is Tokenizer.SHA256.
func readCompiledBody(body []byte, sha, name string) (*Tokenizer, error) {
	r := &compiledReader{b: body, name: name}
	rest := r.section("rest", -1, 1)
	scb := r.section("scalars", 32, 4)
	if r.err != nil {
		return nil, r.err
	}
	sc := le.CopyUint32s(scb)
	vocabSize, nIDs, unkID, flags := int(sc[0]), int(sc[1]), int32(sc[2]), sc[3]
	// Each id costs at least 9 bytes of the file (two ends and a flag byte):
	// nIDs cannot ask for more memory than the file's size does.
	if nIDs > len(body)/9 || vocabSize > nIDs || unkID < -1 || int(unkID) >= nIDs || flags > 7 || sc[7] > 0xffff {
		r.fail("scalars: vocabulary of %d, %d ids, unk %d, flags %d", vocabSize, nIDs, unkID, flags)
		return nil, r.err
	}
	mt := &modelTables{vocabSize: vocabSize, unkID: unkID, charLevel: flags&1 != 0, symCut: flags&2 != 0}
	tokEnds := r.ends("tokEnds", nIDs)
	tokArena := r.arena("tokArena", tokEnds)
	v := vocabIndex{n: int(sc[5])}
	v.ends = r.ends("keyEnds", nIDs)
	v.keys = r.arena("keys", v.ends)
	idFlags := r.section("idFlags", nIDs, 1)
	vs := r.section("vocabSlots", -1, 8)
	var ids [2][]byte
	for k := range ids {
		ids[k] = r.section("byteID", 4*256, 4)
	}
	msOff := r.off
	ms := r.section("mergeSlots", -1, 8)
	sideOff := r.off
	side := r.section("mergeSide", -1, 4)
	bpOff := r.off
	bp := r.section("bytePairs", -1, 8)
	ws := r.section("wordSlots", -1, 16)
	wl := r.section("wordLong", -1, 24)
	if r.err == nil && r.off != len(body) {
		r.fail("%d bytes after the last section", len(body)-r.off)
	}
	if r.err != nil {
		return nil, r.err
	}
	// The sections are in place. The merge table, most of the file, is
	// checked beside the rest.
	mergeErr := make(chan error, 1)
	go func() {
		mergeErr <- mt.readMerges(ms, side, bp, sc[6], sc[7], nIDs, name, msOff, sideOff, bpOff)
	}()
	var f fileJSON
	err := json.Unmarshal(rest, &f)
	if err == nil && (f.Model == nil || f.Model.Vocab != nil || len(f.Model.Merges.pairs) != 0) {
		err = errors.New("the model is missing or has its tables")
	}
	if err != nil {
		<-mergeErr
		return nil, corrupt(name, "rest: %v", err)
	}
	// Room for the added tokens' ids, which parseAdded appends.
	room := nIDs + min(len(f.AddedTokens), nIDs+1)
	mt.tokens = le.Substrings(tokArena, tokEnds, room)
	mt.decoded = le.Substrings(v.keys, v.ends, room)
	mt.isToken = make([]bool, nIDs, room)
	if flags&4 != 0 {
		mt.selfBPE = make([]bool, nIDs)
	}
	var allFlags byte
	for id, f := range idFlags {
		allFlags |= f
		mt.isToken[id] = f&1 != 0
		if f&2 != 0 {
			mt.oddIDs = append(mt.oddIDs, int32(id))
		}
	}
	if mt.selfBPE != nil {
		for id, f := range idFlags {
			mt.selfBPE[id] = f&4 != 0
		}
	}
	if allFlags > 7 || (allFlags&4 != 0 && mt.selfBPE == nil) {
		r.fail("idFlags: flags other than 1, 2 and 4 (with selfBPE)")
	}
	v.slots = le.Uint64s(vs)
	v.shift = r.tableShift("vocabSlots", len(v.slots), sc[4])
	if filled, maxID, tags := checkVocabSlots(v.slots); tags || filled >= len(v.slots) || filled != v.n || (filled > 0 && int(maxID) >= nIDs) {
		r.fail("vocabSlots: %d of %d slots filled, %d keys; tags and ids valid: %v", filled, len(v.slots), v.n, !tags && (filled == 0 || int(maxID) < nIDs))
	}
	mt.vocab = v
	mt.words = wordTable{slots: le.Uint64s(ws), long: le.Uint64s(wl)}
	n, nl := len(mt.words.slots)/2, len(mt.words.long)/3
	if n < minWordSlots || n&(n-1) != 0 || nl < minWordSlots || nl&(nl-1) != 0 {
		r.fail("wordSlots, wordLong: %d and %d slots, want powers of two, at least %d", n, nl, minWordSlots)
	} else {
		mt.words.shift, mt.words.mask = uint(64-bits.TrailingZeros(uint(n))), uint64(n-1)
		mt.words.longShift, mt.words.longMask = uint(64-bits.TrailingZeros(uint(nl))), uint64(nl-1)
		filled, maxID, badLen := checkWordSlots(mt.words.slots)
		lfilled, lmaxID, lbadLen := checkLongWordSlots(mt.words.long)
		if badLen || filled >= n || (filled > 0 && int(maxID) >= nIDs) || (filled > 0 && mt.charLevel) {
			r.fail("wordSlots: %d of %d slots filled; lengths and ids valid: %v", filled, n, !badLen && (filled == 0 || int(maxID) < nIDs))
		}
		if lbadLen || lfilled >= nl || (lfilled > 0 && int(lmaxID) >= nIDs) || (lfilled > 0 && mt.charLevel) {
			r.fail("wordLong: %d of %d slots filled; lengths and ids valid: %v", lfilled, nl, !lbadLen && (lfilled == 0 || int(lmaxID) < nIDs))
		}
		mt.words.n = filled + lfilled
	}
	for k, dst := range []*[256]int32{&mt.byteID, &mt.fallbackID} {
		for i, x := range le.CopyUint32s(ids[k]) {
			id := int32(x)
			if id != -1 && !(id >= 0 && int(id) < nIDs) && !(k == 1 && id == 0) {
				r.fail("byte %d: id %d of %d", i, id, nIDs)
			}
			dst[i] = id
		}
	}
	if err := <-mergeErr; r.err == nil {
		r.err = err
	}
	if r.err != nil {
		return nil, r.err
	}
	t := &Tokenizer{sha: sha, compiled: true}
	if _, err := t.build(&f, mt, false); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return t, nil
}

// readMerges sets mt.merges and mt.bytePairs from their sections (at
// offsets msOff, sideOff and bpOff of the body) after checking them: the
// table's bits (params: idBits | placeBits<<8), every filled slot marked
// used, every id below nIDs, every val an order below 2^32-1 (noRank), an
// empty slot to end each probe. It reads only its arguments and
// mt.charLevel, so it runs beside the rest.
func (mt *modelTables) readMerges(ms, side, bp []byte, shift, params uint32, nIDs int, name string, msOff, sideOff, bpOff int) error {
	fail := func(off int, format string, args ...any) error {
		return &CorruptError{Kind: ErrCorrupt, Path: name, Offset: int64(off), What: fmt.Sprintf(format, args...)}
	}
	slots := le.Uint64s(ms)
	n := len(slots)
	if n < 16 || n&(n-1) != 0 || uint(shift) != uint(64-bits.TrailingZeros(uint(n))) {
		return fail(msOff, "mergeSlots: %d slots with shift %d", n, shift)
	}
	t := mergeTable{slots: slots, shift: uint(shift)}
	t.setBits(uint(params&0xff), uint(params>>8))
	if len(side) > 0 {
		t.side = le.Uint32s(side)
	}
	if t.idBits < 1 || t.idBits > maxMergeIDBits || nIDs > 0 && bits.Len(uint(nIDs-1)) > int(t.idBits) || t.idBits+t.placeBits > 31 ||
		(t.side != nil && t.placeBits != 0) || bits.Len(uint(len(t.side))) > int(t.valBits) {
		return fail(msOff, "mergeSlots: ids of %d bits, places of %d, %d merged ids aside", t.idBits, t.placeBits, len(t.side))
	}
	for _, id := range t.side {
		if id >= uint32(nIDs) {
			return fail(sideOff, "mergeSide: merged id %d of %d", id, nIDs)
		}
	}
	if empty, ok := t.check(nIDs); !ok || empty == 0 {
		return fail(msOff, "mergeSlots: %d empty slots; ids and orders valid: %v", empty, ok)
	}
	mt.merges = t
	if len(bp) == 0 {
		return nil
	}
	if len(bp) != 8<<16 || mt.charLevel {
		return fail(bpOff, "bytePairs: %d bytes, want 0 or %d", len(bp), 8<<16)
	}
	mt.bytePairs = le.Uint64s(bp)
	for _, x := range mt.bytePairs {
		if x>>32 != noRank && uint32(x) >= uint32(nIDs) {
			return fail(bpOff, "bytePairs: a merged id out of range")
		}
	}
	return nil
}

// checkVocabSlots returns the number of filled slots of a vocabulary index,
// the largest id in them and whether a filled one lacks its tag's low bit
// (vocabIndex.set always sets it). No branches: the slots are megabytes.
func checkVocabSlots(slots []uint64) (filled int, maxID uint32, untagged bool) {
	var bad uint64
	for _, e := range slots {
		full := (e | -e) >> 63 // 1 when e != 0
		filled += int(full)
		bad |= full &^ (e >> 32)
		maxID = max(maxID, uint32(e))
	}
	return filled, maxID, bad&1 != 0
}

// check returns the number of empty slots of a merge table read from a
// file, and whether every filled one is marked used, with ids below nIDs
// and a val below the table's bound: its side's length, else 2^(idBits +
// placeBits) with a merged id below nIDs. No branches: the slots are
// megabytes.
func (t *mergeTable) check(nIDs int) (empty int, ok bool) {
	vb := t.valBits
	idMask, valMask := uint64(1)<<t.idBits-1, uint64(1)<<vb-1
	valLim, idLim := uint64(1)<<(t.idBits+t.placeBits), uint64(nIDs)
	inline := uint64(1)
	if t.side != nil {
		valLim, inline = uint64(len(t.side)), 0
	}
	ge := func(x, lim uint64) uint64 { return (lim - 1 - x) >> 63 } // x >= lim, for lim >= 1 and x, lim < 2^62
	var bad uint64
	for _, s := range t.slots {
		full := (s | -s) >> 63
		empty += int(full ^ 1)
		ab := s &^ mergeUsed >> vb
		v := s & valMask
		bad |= full & (s>>63 ^ 1 | ge(ab>>t.idBits, idLim) | ge(ab&idMask, idLim) | ge(v, valLim) | inline&ge(v>>t.placeBits, idLim))
	}
	return empty, bad == 0
}

// readCompiledFile returns the bytes of a compiled cache file of at most
// maxCompiledSize bytes, mapped read-only where the system allows (no copy:
// the tables are used in place; upgradeTables copies two into huge pages
// after Load), and a function that releases them when they are not used. A
// Tokenizer read from them keeps them for the life of the process: strings
// it returns alias them. writeCompiled replaces files by rename, so a mapped
// file never changes under its readers.
func readCompiledFile(path string) ([]byte, func(), error) {
	b, mapped, err := le.ReadFile(path, maxCompiledSize)
	if err != nil {
		return nil, nil, err
	}
	if !mapped {
		return b, func() {}, nil
	}
	return b, func() { le.Unmap(b) }, nil
}

// writeCompiled writes b to path atomically: a temporary file in the same
// directory, renamed over path.
func writeCompiled(path string, b []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// sourceKey is the cache key of a source file's bytes.
func sourceKey(raw []byte) [32]byte { return sha256.Sum256(raw) }

// The source index: beside the compiled files, one small file for each
// source path loaded (named after the SHA-256 of the path) with the
// source's size, modification time and key as Load last saw them. When
// the source still has that size and time, Load reads the compiled file of
// that key while it hashes the source, where it hashed first and read
// after: hashing is about 40% of a Load from the cache (Llama-3.1's 9 MB
// tokenizer.json, ~6 ms). The index is a guess, never trusted: the
// compiled file is kept only when the source's hash, computed as always,
// is the key the index named, so a source changed behind an unchanged
// size and time costs a wasted read, and a wrong, stale or corrupt index
// file the same.
const (
	indexMagic = "FERRYSRC"
	indexSize  = 8 + 8 + 8 + 32 // magic, size, modification time (ns), key
)

// indexPath is the index file of the source at path in the cache dir.
func indexPath(dir, path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	h := sha256.Sum256([]byte(path))
	return filepath.Join(dir, hex.EncodeToString(h[:16])+".ferrysrc")
}

// indexStamp is what the index holds of a source beside its key.
func indexStamp(st os.FileInfo) (size, mtime uint64) {
	return uint64(st.Size()), uint64(st.ModTime().UnixNano())
}

// readIndex returns the key that the index of the source at path (with
// st, its Stat) names for it, if the index is there and holds st's size
// and modification time.
func readIndex(dir, path string, st os.FileInfo) ([32]byte, bool) {
	var key [32]byte
	f, err := os.Open(indexPath(dir, path))
	if err != nil {
		return key, false
	}
	defer f.Close()
	var b [indexSize + 1]byte
	n, _ := io.ReadFull(f, b[:])
	size, mtime := indexStamp(st)
	le := binary.LittleEndian
	if n != indexSize || string(b[:8]) != indexMagic || le.Uint64(b[8:]) != size || le.Uint64(b[16:]) != mtime {
		return key, false
	}
	copy(key[:], b[24:])
	return key, true
}

// writeIndex writes the index of the source at path: st (its Stat) has the
// key key. Errors are ignored, as the cache's.
func writeIndex(dir, path string, st os.FileInfo, key [32]byte) {
	b := make([]byte, indexSize)
	size, mtime := indexStamp(st)
	copy(b, indexMagic)
	binary.LittleEndian.PutUint64(b[8:], size)
	binary.LittleEndian.PutUint64(b[16:], mtime)
	copy(b[24:], key[:])
	p := indexPath(dir, path)
	if writeCompiled(p, b) == nil {
		names, _ := filepath.Glob(p + ".tmp-*")
		for _, name := range names {
			removeOldTemp(name)
		}
	}
}

// hashSource returns the cache key of the file at path (of at most
// MaxFileSize bytes), read through a small buffer: a Load from the cache
// needs no copy of the source, and its megabytes never reach the heap.
func hashSource(path string) ([32]byte, error) {
	var key [32]byte
	f, err := os.Open(path)
	if err != nil {
		return key, err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || st.Size() > MaxFileSize {
		return key, fmt.Errorf("%s: not a file of at most %d bytes", path, MaxFileSize)
	}
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for n := int64(0); ; {
		k, err := f.Read(buf)
		h.Write(buf[:k])
		if n += int64(k); n > MaxFileSize {
			return key, fmt.Errorf("%s: larger than %d bytes", path, MaxFileSize)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return key, err
		}
	}
	h.Sum(key[:0])
	return key, nil
}
