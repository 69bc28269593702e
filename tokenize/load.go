package tokenize

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/text/unicode/norm"
)

// Errors returned by Load, matched with errors.Is.
var (
	// ErrUnsupported marks a tokenizer.json component ferry does not implement.
	ErrUnsupported = errors.New("tokenize: unsupported component")
	// ErrCorrupt marks a tokenizer.json that is not valid or not consistent.
	ErrCorrupt = errors.New("tokenize: invalid tokenizer.json")
)

// MaxFileSize is the largest tokenizer.json (decompressed) Load accepts.
const MaxFileSize = 1 << 30

// Load reads a Hugging Face tokenizer.json. path is the file itself
// (tokenizer.json or tokenizer.json.zst) or a directory holding either; for a
// directory, tokenizer_config.json, when present, names the BOS, EOS and pad
// tokens reported by Special. Load goes through the compiled cache (see
// the package doc): a second Load of the same file takes milliseconds.
func Load(path string) (*Tokenizer, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	var cfgPath string
	if st.IsDir() {
		dir := path
		path = filepath.Join(dir, "tokenizer.json")
		if _, err := os.Stat(path); err != nil {
			if _, err2 := os.Stat(path + ".zst"); err2 == nil {
				path += ".zst"
			} else {
				return nil, fmt.Errorf("tokenize: %s holds neither tokenizer.json nor tokenizer.json.zst", dir)
			}
		}
		cfgPath = filepath.Join(dir, "tokenizer_config.json")
	} else {
		cfgPath = filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	}
	t, err := loadFile(path)
	if err != nil {
		return nil, err
	}
	if cfg, err := os.ReadFile(cfgPath); err == nil {
		if err := t.applyConfig(cfg); err != nil {
			return nil, fmt.Errorf("%s: %w", cfgPath, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	return t, nil
}

// loadFile loads the tokenizer.json (or .zst) at path through the compiled
// cache (compiled.go): its tables are read from there when a valid entry
// for these bytes exists; else the file is parsed and the entry written.
// Nothing about the cache makes Load fail.
func loadFile(path string) (*Tokenizer, error) {
	dir := cacheDir()
	if dir == "" {
		raw, err := readSource(path)
		if err != nil {
			return nil, err
		}
		return parseSource(path, raw)
	}
	st, err := os.Stat(path)
	if err == nil {
		if t := loadCompiled(dir, path, st); t != nil {
			return t, nil
		}
	}
	raw, err := readSource(path)
	if err != nil {
		return nil, err
	}
	// The key of the bytes parsed: the file may have changed since it was hashed.
	key := sourceKey(raw)
	cpath := filepath.Join(dir, compiledName(key))
	data, err := decompress(path, raw)
	if err != nil {
		return nil, err
	}
	t, mt, rest, err := parseTables(data, true)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if mt != nil && writeCompiled(cpath, appendCompiled(nil, key, t.sha, rest, mt)) == nil {
		removeStale(dir, key)
		if st != nil {
			writeIndex(dir, path, st, key)
		}
	}
	return t, nil
}

// loadCompiled returns the Tokenizer of the compiled file in dir of the
// source at path (st: its Stat), nil when there is none that checks out.
// The cache needs the source's key alone, not its bytes. Where the source
// index names a key for st (see readIndex), that key's file is read while
// the source is hashed, and kept only if the hash is that key.
func loadCompiled(dir, path string, st os.FileInfo) *Tokenizer {
	guess, ok := readIndex(dir, path, st)
	if !ok {
		key, err := hashSource(path)
		if err != nil {
			return nil
		}
		return keepCompiled(dir, path, st, key)
	}
	type sum struct {
		key [32]byte
		err error
	}
	c := make(chan sum, 1)
	go func() {
		k, err := hashSource(path)
		c <- sum{k, err}
	}()
	t, release := readCached(dir, guess)
	h := <-c
	switch {
	case h.err != nil:
		release()
		return nil
	case h.key == guess: // nil where the key's file is refused: parse
		if t != nil {
			t.startUpgrade()
		}
		return t
	}
	release()
	return keepCompiled(dir, path, st, h.key)
}

// keepCompiled returns the Tokenizer of the compiled file of key in dir,
// the key of the source at path (st: its Stat), and writes the source's
// index; nil when there is no such file that checks out.
func keepCompiled(dir, path string, st os.FileInfo, key [32]byte) *Tokenizer {
	t, _ := readCached(dir, key)
	if t != nil {
		t.startUpgrade()
		writeIndex(dir, path, st, key)
	}
	return t
}

// readCached reads the compiled file of key in dir: its Tokenizer, upgrade
// not started, and what releases the file's memory (for a Tokenizer that
// is not kept); nil and a no-op where the file is missing or refused.
func readCached(dir string, key [32]byte) (*Tokenizer, func()) {
	cpath := filepath.Join(dir, compiledName(key))
	b, release, err := readCompiledFile(cpath)
	if err != nil {
		return nil, func() {}
	}
	t, err := readCompiled(b, key, cpath)
	if err != nil {
		release()
		return nil, func() {}
	}
	return t, release
}

// parseSource parses the bytes of the file at path.
func parseSource(path string, raw []byte) (*Tokenizer, error) {
	data, err := decompress(path, raw)
	if err != nil {
		return nil, err
	}
	t, err := parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// New parses the bytes of a tokenizer.json (uncompressed).
func New(data []byte) (*Tokenizer, error) {
	return parse(data)
}

// readMaybeZstd reads the file at path, decompressed when its name ends in .zst.
func readMaybeZstd(path string) ([]byte, error) {
	raw, err := readSource(path)
	if err != nil {
		return nil, err
	}
	return decompress(path, raw)
}

// readSource reads the file at path as it is stored.
func readSource(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("tokenize: %w", err)
	}
	tooBig := fmt.Errorf("tokenize: %s: larger than %d bytes", path, MaxFileSize)
	if st.Size() > MaxFileSize {
		return nil, tooBig
	}
	// One read of the exact size (io.ReadAll would grow and copy).
	data := make([]byte, st.Size())
	if _, err := io.ReadFull(f, data); err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", path, err)
	}
	return data, nil
}

// decompress returns data, the bytes of the file at path, decompressed when
// the name ends in .zst.
func decompress(path string, data []byte) ([]byte, error) {
	tooBig := fmt.Errorf("tokenize: %s: larger than %d bytes", path, MaxFileSize)
	if !strings.HasSuffix(path, ".zst") {
		return data, nil
	}
	d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(MaxFileSize), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, fmt.Errorf("tokenize: %s: %w", path, err)
	}
	defer d.Close()
	// The frame header usually records the decompressed size: decode into a
	// buffer of that size at once (when it is plausible: a corrupt header
	// must not make us allocate a gigabyte for a small file).
	var dst []byte
	var h zstd.Header
	if h.Decode(data) == nil && h.HasFCS && h.FrameContentSize <= MaxFileSize && h.FrameContentSize <= 64*uint64(len(data))+1<<20 {
		dst = make([]byte, 0, h.FrameContentSize)
	}
	out, err := d.DecodeAll(data, dst)
	if err != nil {
		if errors.Is(err, zstd.ErrDecoderSizeExceeded) || errors.Is(err, zstd.ErrWindowSizeExceeded) {
			return nil, tooBig
		}
		return nil, fmt.Errorf("tokenize: %s: %w", path, err)
	}
	if len(out) > MaxFileSize {
		return nil, tooBig
	}
	return out, nil
}

// jsonPath errors.
func unsupported(path, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrUnsupported, path, fmt.Sprintf(format, args...))
}

func corrupt(path, format string, args ...any) error {
	return &CorruptError{Kind: ErrCorrupt, Path: path, Offset: -1, What: fmt.Sprintf(format, args...)}
}

// CorruptError is tokenize's form of ferry's corruption error
// (internal/corrupt.Error, which tokenize may not import: it imports
// nothing of ferry): the same fields and the same message, "KIND: PATH:
// byte OFFSET: WHAT", the offset left out when it is -1. Path is the
// JSON path in tokenizer.json ("model.vocab").
type CorruptError struct {
	Kind   error // ErrCorrupt
	Path   string
	Offset int64
	What   string
}

func (e *CorruptError) Error() string {
	s := e.Kind.Error() + ": " + e.Path
	if e.Offset >= 0 {
		s += ": byte " + strconv.FormatInt(e.Offset, 10)
	}
	return s + ": " + e.What
}

// Unwrap returns Kind.
func (e *CorruptError) Unwrap() error { return e.Kind }

type fileJSON struct {
	Version       string          `json:"version"`
	Truncation    json.RawMessage `json:"truncation"`
	Padding       json.RawMessage `json:"padding"`
	AddedTokens   []addedToken    `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         *modelJSON      `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
}

func isNull(m json.RawMessage) bool {
	m = bytes.TrimSpace(m)
	return len(m) == 0 || string(m) == "null"
}

// component decodes the "type" of a component and the component into v.
func component(m json.RawMessage, path string, v any) (string, error) {
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(m, &head); err != nil {
		return "", corrupt(path, "%v", err)
	}
	if head.Type == nil {
		return "", corrupt(path, `no "type"`)
	}
	if v != nil {
		if err := json.Unmarshal(m, v); err != nil {
			return "", corrupt(path, "%s: %v", *head.Type, err)
		}
	}
	return *head.Type, nil
}

// decodeFast decodes data into f with the model's vocab and merges parsed
// by hand, in parallel with encoding/json decoding the rest (see
// splitModelTables). It reports false, with f untouched, wherever anything
// is unusual or wrong: then the caller decodes the slow way, which gives the
// error messages.
func decodeFast(data []byte, f *fileJSON) bool {
	_, ok := decodeFastRest(data, f)
	return ok
}

// decodeFastRest is decodeFast, returning also the document without the
// model's tables (both replaced by null).
func decodeFastRest(data []byte, f *fileJSON) (rest []byte, ok bool) {
	rest, vs, ms, ok := splitModelTables(data)
	if !ok || string(data[vs.lo:vs.hi]) == "null" || string(data[ms.lo:ms.hi]) == "null" {
		return nil, false
	}
	var vocab vocabJSON
	var merges mergesJSON
	var g fileJSON
	var wg sync.WaitGroup
	var errV, errM error
	wg.Go(func() {
		if errV = vocab.UnmarshalJSON(data[vs.lo:vs.hi]); errV == nil {
			vocab.index()
		}
	})
	wg.Go(func() { errM = merges.UnmarshalJSON(data[ms.lo:ms.hi]) })
	errR := json.Unmarshal(rest, &g)
	wg.Wait()
	if errV != nil || errM != nil || errR != nil || g.Model == nil {
		return nil, false
	}
	g.Model.Vocab, g.Model.Merges = &vocab, merges
	*f = g
	return rest, true
}

func parse(data []byte) (*Tokenizer, error) {
	t, _, _, err := parseTables(data, false)
	return t, err
}

// parseTables parses a tokenizer.json. With keep, it also returns the model's
// tables and the document without them (rest), for the compiled cache; both
// are nil when the document took the slow way (an unusual layout).
func parseTables(data []byte, keep bool) (*Tokenizer, *modelTables, []byte, error) {
	var f fileJSON
	rest, ok := decodeFastRest(data, &f)
	if !ok {
		rest = nil
		if err := json.Unmarshal(data, &f); err != nil {
			var se *json.SyntaxError
			var pe *pathError
			if errors.As(err, &pe) {
				return nil, nil, nil, corrupt(pe.path, "%v", pe.err)
			}
			if errors.As(err, &se) {
				return nil, nil, nil, corrupt("$", "byte %d: %v", se.Offset, err)
			}
			return nil, nil, nil, corrupt("$", "%v", err)
		}
	}
	sum := sha256.Sum256(data)
	t := &Tokenizer{sha: hex.EncodeToString(sum[:])}
	mt, err := t.build(&f, nil, keep && rest != nil)
	if err != nil {
		return nil, nil, nil, err
	}
	if mt == nil {
		rest = nil
	}
	return t, mt, rest, nil
}

// build makes t from a decoded tokenizer.json. The model's tables come from
// f.Model, or from tables (the compiled cache) when it is not nil; keep
// returns them as built.
func (t *Tokenizer) build(f *fileJSON, tables *modelTables, keep bool) (*modelTables, error) {
	if !isNull(f.Truncation) {
		return nil, unsupported("$.truncation", "truncation is not supported (set it to null)")
	}
	if !isNull(f.Padding) {
		return nil, unsupported("$.padding", "padding is not supported (set it to null)")
	}
	if f.Model == nil {
		return nil, corrupt("$.model", "missing")
	}
	if err := t.parseNormalizer(f.Normalizer, "$.normalizer"); err != nil {
		return nil, err
	}
	if err := t.parsePreTokenizer(f.PreTokenizer, "$.pre_tokenizer"); err != nil {
		return nil, err
	}
	if err := t.parseModel(f.Model, "$.model", tables); err != nil {
		return nil, err
	}
	var mt *modelTables
	if keep {
		mt = t.snapshotTables()
	}
	if err := t.parseAdded(f.AddedTokens); err != nil {
		return nil, err
	}
	if err := t.parsePost(f.PostProcessor, "$.post_processor"); err != nil {
		return nil, err
	}
	if err := t.parseDecoder(f.Decoder, "$.decoder"); err != nil {
		return nil, err
	}
	t.finish()
	if mt != nil {
		mt.bytePairs, mt.selfBPE, mt.words = t.model.bytePairs, t.model.selfBPE, t.model.words
	}
	return mt, nil
}

func (t *Tokenizer) parseNormalizer(m json.RawMessage, path string) error {
	if isNull(m) {
		return nil
	}
	var v struct {
		Normalizers []json.RawMessage `json:"normalizers"`
		Prepend     *string           `json:"prepend"`
		Pattern     struct {
			String *string `json:"String"`
			Regex  *string `json:"Regex"`
		} `json:"pattern"`
		Content *string `json:"content"`
	}
	typ, err := component(m, path, &v)
	if err != nil {
		return err
	}
	switch typ {
	case "NFC":
		t.norms = append(t.norms, normStep{form: norm.NFC, isForm: true})
	case "NFD":
		t.norms = append(t.norms, normStep{form: norm.NFD, isForm: true})
	case "NFKC":
		t.norms = append(t.norms, normStep{form: norm.NFKC, isForm: true})
	case "NFKD":
		t.norms = append(t.norms, normStep{form: norm.NFKD, isForm: true})
	case "Prepend":
		if v.Prepend == nil {
			return corrupt(path+".prepend", "missing")
		}
		t.norms = append(t.norms, normStep{prepend: *v.Prepend})
	case "Replace":
		from, err := replacePattern(v.Pattern.String, v.Pattern.Regex, path)
		if err != nil {
			return err
		}
		if v.Content == nil {
			return corrupt(path+".content", "missing")
		}
		t.norms = append(t.norms, normStep{from: from, to: *v.Content, replace: true})
	case "Sequence":
		for i, n := range v.Normalizers {
			if err := t.parseNormalizer(n, fmt.Sprintf("%s.normalizers[%d]", path, i)); err != nil {
				return err
			}
		}
	default:
		return unsupported(path, "normalizer %q", typ)
	}
	return nil
}

// replacePattern returns the literal a Replace normalizer or decoder looks
// for. A Regex pattern is supported only when it has no regex syntax, so
// that it means the same string.
func replacePattern(str, re *string, path string) (string, error) {
	switch {
	case str != nil:
		if *str == "" {
			return "", unsupported(path+".pattern.String", "an empty pattern")
		}
		return *str, nil
	case re != nil:
		if *re == "" || strings.ContainsAny(*re, `\.+*?()|[]{}^$`) {
			return "", unsupported(path+".pattern.Regex", "Replace with the regex %q (only a plain string)", *re)
		}
		return *re, nil
	}
	return "", corrupt(path+".pattern", `want {"String": ...} or {"Regex": ...}`)
}

type splitJSON struct {
	Pattern struct {
		Regex  *string `json:"Regex"`
		String *string `json:"String"`
	} `json:"pattern"`
	Behavior         string            `json:"behavior"`
	Invert           bool              `json:"invert"`
	AddPrefixSpace   *bool             `json:"add_prefix_space"`
	UseRegex         *bool             `json:"use_regex"`
	PreTokenizers    []json.RawMessage `json:"pretokenizers"`
	Replacement      *string           `json:"replacement"`
	PrependScheme    *string           `json:"prepend_scheme"`
	Split            *bool             `json:"split"`
	IndividualDigits bool              `json:"individual_digits"`
}

func (t *Tokenizer) parsePreTokenizer(m json.RawMessage, path string) error {
	if isNull(m) {
		return nil
	}
	var v splitJSON
	typ, err := component(m, path, &v)
	if err != nil {
		return err
	}
	if t.byteLevel {
		return unsupported(path, "pre-tokenizer %q after ByteLevel", typ)
	}
	if t.meta != nil {
		return unsupported(path, "pre-tokenizer %q after Metaspace", typ)
	}
	switch typ {
	case "Sequence":
		for i, p := range v.PreTokenizers {
			if err := t.parsePreTokenizer(p, fmt.Sprintf("%s.pretokenizers[%d]", path, i)); err != nil {
				return err
			}
		}
	case "Split":
		// invert=true flips which parts are matches: with Isolated every
		// part is a piece either way; with Removed the regex matches are
		// kept and the text between them dropped.
		if v.Behavior != "Isolated" && v.Behavior != "Removed" {
			return unsupported(path+".behavior", "Split behavior %q", v.Behavior)
		}
		var pat string
		literal := false
		switch {
		case v.Pattern.Regex != nil:
			pat = *v.Pattern.Regex
		case v.Pattern.String != nil:
			pat, literal = *v.Pattern.String, true
		default:
			return corrupt(path+".pattern", `want {"Regex": ...} or {"String": ...}`)
		}
		isolated := v.Behavior == "Isolated"
		keepMatches := v.Invert && !isolated
		removed := !isolated && !v.Invert
		st := preStage{}
		if !literal && isolated && !v.Invert {
			st.pattern = pat // for finish to recognize DeepSeek's three Splits
		}
		if !literal && !removed {
			// The scanners' regexes match at every position: the matches tile
			// the text, so keeping only the matches is Isolated.
			st.scan = scanKindOf(pat)
		}
		if st.scan == scanNone {
			if pat == "" {
				return unsupported(path+".pattern", "empty pattern")
			}
			re, err := newRegexSplitter(pat, literal, isolated)
			if err != nil {
				return unsupported(path+".pattern", "regex %q: %v", pat, err)
			}
			re.keepMatches = keepMatches
			st.re = re
		}
		t.stages = append(t.stages, st)
	case "Digits":
		t.stages = append(t.stages, preStage{digits: true, individual: v.IndividualDigits})
	case "ByteLevel":
		t.byteLevel = true
		if v.AddPrefixSpace != nil && *v.AddPrefixSpace {
			t.stages = append(t.stages, preStage{prefixSpace: true})
		}
		if v.UseRegex == nil || *v.UseRegex {
			t.stages = append(t.stages, preStage{scan: scanGPT2})
		}
	case "Metaspace":
		if len(t.stages) > 0 {
			return unsupported(path, "Metaspace after other pre-tokenizers")
		}
		ms, err := parseMetaspace(&v, path)
		if err != nil {
			return err
		}
		t.meta = ms
	default:
		return unsupported(path, "pre-tokenizer %q", typ)
	}
	return nil
}

// parseMetaspace reads a Metaspace pre-tokenizer or decoder: replacement,
// prepend_scheme ("always", "first", "never"; files from before it existed
// have add_prefix_space, true meaning "always") and split (default true).
func parseMetaspace(v *splitJSON, path string) (*metaspace, error) {
	ms := &metaspace{repl: "\u2581", scheme: prependAlways, split: true}
	if v.Replacement != nil {
		if utf8.RuneCountInString(*v.Replacement) != 1 {
			return nil, corrupt(path+".replacement", "%q is not one character", *v.Replacement)
		}
		ms.repl = *v.Replacement
	}
	switch {
	case v.PrependScheme != nil:
		switch *v.PrependScheme {
		case "always":
			ms.scheme = prependAlways
		case "first":
			ms.scheme = prependFirst
		case "never":
			ms.scheme = prependNever
		default:
			return nil, unsupported(path+".prepend_scheme", "%q", *v.PrependScheme)
		}
	case v.AddPrefixSpace != nil && !*v.AddPrefixSpace:
		ms.scheme = prependNever
	}
	if v.Split != nil {
		ms.split = *v.Split
	}
	return ms, nil
}

type modelJSON struct {
	Type                    string     `json:"type"`
	Dropout                 *float64   `json:"dropout"`
	UnkToken                *string    `json:"unk_token"`
	ContinuingSubwordPrefix *string    `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string    `json:"end_of_word_suffix"`
	FuseUnk                 bool       `json:"fuse_unk"`
	ByteFallback            bool       `json:"byte_fallback"`
	IgnoreMerges            bool       `json:"ignore_merges"`
	Vocab                   *vocabJSON `json:"vocab"`
	Merges                  mergesJSON `json:"merges"`
}

// parseModel builds the model from v, or installs tables (the compiled
// cache) when they are not nil: v's settings are checked and used either way.
func (t *Tokenizer) parseModel(v *modelJSON, path string, tables *modelTables) error {
	if typ := v.Type; typ != "BPE" {
		return unsupported(path+".type", "model %q (only BPE)", typ)
	}
	if v.Dropout != nil && *v.Dropout != 0 {
		return unsupported(path+".dropout", "BPE dropout %v", *v.Dropout)
	}
	if v.ContinuingSubwordPrefix != nil && *v.ContinuingSubwordPrefix != "" {
		return unsupported(path+".continuing_subword_prefix", "%q", *v.ContinuingSubwordPrefix)
	}
	if v.EndOfWordSuffix != nil && *v.EndOfWordSuffix != "" {
		return unsupported(path+".end_of_word_suffix", "%q", *v.EndOfWordSuffix)
	}
	bm := &t.model
	bm.ignoreMerges = v.IgnoreMerges
	bm.fuseUnk = v.FuseUnk
	bm.byteFallback = v.ByteFallback
	bm.charLevel = !t.byteLevel
	if tables != nil {
		return t.installTables(tables)
	}
	if v.Vocab == nil {
		return corrupt(path+".vocab", "missing")
	}
	if !v.Merges.present {
		return corrupt(path+".merges", "missing") // as HF's "Missing vocab/merges"
	}
	if v.Vocab.m == nil {
		v.Vocab.index()
	}
	vocab := v.Vocab.m
	for i := range bm.byteID {
		bm.byteID[i] = -1
	}
	maxID := int32(-1)
	// Without repeated keys (the usual case) the file's entries are exactly
	// the map's: walk them in file order, which is faster than the map.
	toks, ids := v.Vocab.toks, v.Vocab.ids
	if len(vocab) != len(toks) {
		toks, ids = make([]string, 0, len(vocab)), make([]int32, 0, len(vocab))
		for tok, id := range vocab {
			toks, ids = append(toks, tok), append(ids, id)
		}
	}
	limit := int32(2*len(vocab) + 1<<16) // ids are dense in real files; bounds memory
	for k, tok := range toks {
		id := ids[k]
		if id < 0 || id >= limit {
			return corrupt(path+".vocab", "token %q has id %d (vocabulary of %d)", tok, id, len(vocab))
		}
		maxID = max(maxID, id)
	}
	t.vocabSize = len(vocab)
	bm.unkID = -1
	if v.UnkToken != nil {
		id, ok := vocab[*v.UnkToken]
		if !ok {
			return corrupt(path+".unk_token", "%q is not in the vocab", *v.UnkToken)
		}
		bm.unkID = id
	}
	if i := v.Merges.bad - 1; i >= 0 {
		return corrupt(fmt.Sprintf("%s.merges[%d]", path, i), "merge %q is not two tokens separated by one space", v.Merges.pairs[i][0])
	}
	var wg sync.WaitGroup
	var mergeErr error
	wg.Add(1)
	go func() { // the merges need only vocab: build them beside the rest
		defer wg.Done()
		mergeErr = t.buildMerges(vocab, maxID, v.Merges.pairs, path)
	}()
	err := t.buildVocab(toks, ids, maxID, path)
	wg.Wait()
	if err != nil {
		return err
	}
	return mergeErr
}

// buildVocab fills the id -> token tables and the byte-level vocabulary.
// The decoded bytes of all tokens go into one arena, made one string, so
// the 150,000 decoded tokens cost one allocation.
func (t *Tokenizer) buildVocab(toks []string, ids []int32, maxID int32, path string) error {
	bm := &t.model
	t.oddTokens = map[string]int32{}
	t.tokens = make([]string, maxID+1)
	t.decoded = make([]string, maxID+1)
	t.isToken = make([]bool, maxID+1)
	size := 0
	for _, tok := range toks {
		size += len(tok)
	}
	arena := make([]byte, 0, size)
	bounds := make([][2]int32, maxID+1) // each id's bytes in arena
	odd := make([]bool, maxID+1)        // not a byte-level token: decoded as is
	if bm.charLevel {
		// The vocabulary is keyed by the tokens themselves.
		for k, tok := range toks {
			id := ids[k]
			if t.isToken[id] {
				return corrupt(path+".vocab", "id %d is given to %q and %q", id, t.tokens[id], tok)
			}
			t.isToken[id] = true
			t.tokens[id], t.decoded[id] = tok, tok
			if len(tok) == 1 && tok[0] < utf8.RuneSelf {
				bm.byteID[tok[0]] = id
			}
		}
		bm.vocab = newVocabIndex(t.decoded, func(id int) bool { return t.isToken[id] })
		bm.initCharLevel()
		return nil
	}
	for k, tok := range toks {
		id := ids[k]
		if t.isToken[id] {
			return corrupt(path+".vocab", "id %d is given to %q and %q", id, t.tokens[id], tok)
		}
		t.isToken[id] = true
		t.tokens[id] = tok
		lo := len(arena)
		var ok bool
		arena, ok = appendByteLevelDecode(arena, tok)
		bounds[id] = [2]int32{int32(lo), int32(len(arena))}
		odd[id] = !ok
	}
	all := string(arena)
	for id, b := range bounds {
		if !t.isToken[id] {
			continue
		}
		dec := all[b[0]:b[1]]
		t.decoded[id] = dec
		if odd[id] {
			t.oddTokens[t.tokens[id]] = int32(id)
			continue
		}
		if len(dec) == 1 {
			bm.byteID[dec[0]] = int32(id)
		}
	}
	bm.vocab = newVocabIndex(t.decoded, func(id int) bool { return t.isToken[id] && !odd[id] })
	return nil
}

// buildMerges fills t.model.merges from the merge pairs. The three vocab
// lookups per merge are most of the work: they run in parallel chunks, and
// the map is filled after, in merge order.
func (t *Tokenizer) buildMerges(vocab map[string]int32, maxID int32, pairs [][2]string, path string) error {
	kvs := make([]mergeKV, len(pairs))
	parts := min(runtime.GOMAXPROCS(0), 4, len(pairs)/16384+1)
	bad := make([]int, parts) // per part: the first merge with a missing token, or -1
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := p*len(pairs)/parts, (p+1)*len(pairs)/parts
		bad[p] = -1
		wg.Go(func() {
			var buf []byte
			for i := lo; i < hi; i++ {
				a, b := pairs[i][0], pairs[i][1]
				ia, oka := vocab[a]
				ib, okb := vocab[b]
				buf = append(append(buf[:0], a...), b...)
				im, okm := vocab[string(buf)] // no allocation: a map index by string(bytes)
				if !oka || !okb || !okm {
					bad[p] = i
					return
				}
				kvs[i] = mergeKV{pairKey(ia, ib), im}
			}
		})
	}
	wg.Wait()
	for _, i := range bad {
		if i >= 0 {
			return corrupt(fmt.Sprintf("%s.merges[%d]", path, i), "merge %q %q: token not in the vocab", pairs[i][0], pairs[i][1])
		}
	}
	merges, err := newMergeTable(kvs, maxID)
	if err != nil { // a vocabulary or merges larger than the table holds
		return unsupported(path+".merges", "%v", err)
	}
	t.model.merges = merges
	return nil
}

// parseAdded registers the added tokens as HF tokenizers does when it reads
// a tokenizer.json: one at a time, in file order, each getting the id of the
// same content in the vocabulary or among the tokens added before, else the
// next free id. The "id" in the file is not used (HF only warns when it
// differs); for files HF wrote they agree.
func (t *Tokenizer) parseAdded(list []addedToken) error {
	modelSize := int32(t.vocabSize)
	modelID := func(content string) (int32, bool) {
		if t.model.charLevel {
			return t.model.vocab.get(content)
		}
		if id, ok := t.oddTokens[content]; ok {
			return id, true
		}
		raw, ok := byteLevelDecode(content)
		if !ok {
			return -1, false
		}
		id, ok := t.model.vocab.get(string(raw))
		return id, ok && t.tokens[id] == content
	}
	t.addedByContent = map[string]int32{}
	t.addedByID = map[int32]*addedToken{}
	specialSet := map[string]bool{}
	registered := map[addedToken]int{} // registered tokens (ID zeroed) -> count
	var specials, classics []*addedToken
	maxAdded := int32(-1)
	for i := range list {
		a := &list[i]
		if a.Special && a.Content != "" && !specialSet[a.Content] {
			specials = append(specials, a)
			specialSet[a.Content] = true
		}
		if a.ID < 0 {
			return corrupt(fmt.Sprintf("$.added_tokens[%d].id", i), "id %d", a.ID)
		}
		if a.Content == "" {
			continue
		}
		key := *a
		key.ID = 0
		if registered[key] > 0 { // an identical token is registered: ignored
			continue
		}
		id, ok := t.addedByContent[a.Content]
		if !ok {
			id, ok = modelID(a.Content)
		}
		if !ok {
			switch {
			case maxAdded < 0:
				id = modelSize
			case maxAdded >= modelSize || modelSize == 0:
				id = maxAdded + 1
			default:
				id = modelSize
			}
		}
		if id >= 1<<30 {
			return corrupt(fmt.Sprintf("$.added_tokens[%d]", i), "too many tokens")
		}
		t.addedByContent[a.Content] = id
		if old := t.addedByID[id]; old != nil {
			k := *old
			k.ID = 0
			registered[k]--
		}
		t.addedByID[id] = a
		registered[key]++
		maxAdded = max(maxAdded, id)
		if !specialSet[a.Content] {
			classics = append(classics, a)
		}
	}
	if more := int(maxAdded) + 1 - len(t.tokens); more > 0 {
		t.tokens = append(t.tokens, make([]string, more)...)
		t.decoded = append(t.decoded, make([]string, more)...)
		t.isToken = append(t.isToken, make([]bool, more)...)
	}
	extra := 0
	for id, a := range t.addedByID {
		if _, ok := modelID(a.Content); !ok {
			extra++
		}
		t.isToken[id] = true
		// HF gives a normalized token's id back as its normalized content
		// (Llama-2's <s> decodes as "▁<s>"), which then is not special.
		content := a.Content
		if a.Normalized {
			content = t.normalize(content)
		}
		t.tokens[id] = content
		if t.model.charLevel {
			t.decoded[id] = content
			continue
		}
		raw, _ := byteLevelDecode(content)
		t.decoded[id] = string(raw)
	}
	t.vocabSize += extra
	// A token is special when its string is a special content: the set is
	// looked up only for the strings whose first byte and length some
	// special content has (150,000 map lookups would cost milliseconds).
	var first [256]bool
	var lens [256]bool // lens[n]: a special content of n bytes; lens[255]: of 255 or more
	for c := range specialSet {
		first[c[0]] = true
		lens[min(len(c), 255)] = true
	}
	t.isSpecial = make([]bool, len(t.tokens))
	for id, tok := range t.tokens {
		if tok != "" && first[tok[0]] && lens[min(len(tok), 255)] && t.isToken[id] {
			t.isSpecial[id] = specialSet[tok]
		}
	}
	var rawToks, normToks []*addedToken
	for _, a := range append(specials, classics...) {
		// Matching uses the flags of the token last registered for the id.
		m := t.addedByID[t.addedByContent[a.Content]]
		reg := &addedToken{ID: t.addedByContent[a.Content], Content: a.Content, SingleWord: m.SingleWord,
			LStrip: m.LStrip, RStrip: m.RStrip, Normalized: a.Normalized, Special: m.Special}
		if a.Normalized {
			normToks = append(normToks, reg)
		} else {
			rawToks = append(rawToks, reg)
		}
	}
	t.rawTrie = newTrie(rawToks, func(a *addedToken) string { return a.Content })
	t.normTrie = newTrie(normToks, func(a *addedToken) string { return t.normalize(a.Content) })
	return nil
}

type postJSON struct {
	Processors    []json.RawMessage `json:"processors"`
	Single        []json.RawMessage `json:"single"`
	SpecialTokens map[string]struct {
		IDs []int32 `json:"ids"`
	} `json:"special_tokens"`
}

func (t *Tokenizer) parsePost(m json.RawMessage, path string) error {
	if isNull(m) {
		return nil
	}
	var v postJSON
	typ, err := component(m, path, &v)
	if err != nil {
		return err
	}
	switch typ {
	case "ByteLevel":
		// Changes offsets only.
	case "Sequence":
		for i, p := range v.Processors {
			if err := t.parsePost(p, fmt.Sprintf("%s.processors[%d]", path, i)); err != nil {
				return err
			}
		}
	case "TemplateProcessing":
		if t.hasTemplate {
			return unsupported(path, "a second TemplateProcessing")
		}
		t.hasTemplate = true
		seen := false
		for i, item := range v.Single {
			ip := fmt.Sprintf("%s.single[%d]", path, i)
			var it struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			}
			if err := json.Unmarshal(item, &it); err != nil {
				return corrupt(ip, "%v", err)
			}
			switch {
			case it.Sequence != nil:
				if it.Sequence.ID != "A" || seen {
					return unsupported(ip, "sequence %q in a single template", it.Sequence.ID)
				}
				seen = true
			case it.SpecialToken != nil:
				st, ok := v.SpecialTokens[it.SpecialToken.ID]
				if !ok {
					return corrupt(ip, "special token %q is not in special_tokens", it.SpecialToken.ID)
				}
				for _, id := range st.IDs {
					if id < 0 || int(id) >= len(t.tokens) || !t.isToken[id] {
						return corrupt(ip, "special token %q has id %d, not in the vocabulary", it.SpecialToken.ID, id)
					}
				}
				if seen {
					t.suffix = append(t.suffix, st.IDs...)
				} else {
					t.prefix = append(t.prefix, st.IDs...)
				}
			default:
				return corrupt(ip, "want SpecialToken or Sequence")
			}
		}
		if !seen {
			return corrupt(path+".single", "no $A sequence")
		}
	default:
		return unsupported(path, "post-processor %q", typ)
	}
	return nil
}

func (t *Tokenizer) parseDecoder(m json.RawMessage, path string) error {
	if isNull(m) {
		t.joinDecode = true
		return nil
	}
	var v struct {
		Decoders []json.RawMessage `json:"decoders"`
		Pattern  struct {
			String *string `json:"String"`
			Regex  *string `json:"Regex"`
		} `json:"pattern"`
		Content json.RawMessage `json:"content"`
		Start   int             `json:"start"`
		Stop    int             `json:"stop"`
	}
	typ, err := component(m, path, &v)
	if err != nil {
		return err
	}
	switch typ {
	case "ByteLevel":
		t.decSteps = append(t.decSteps, decStep{kind: decByteLevel})
	case "Sequence":
		for i, d := range v.Decoders {
			p := fmt.Sprintf("%s.decoders[%d]", path, i)
			if isNull(d) {
				return corrupt(p, "null")
			}
			if err := t.parseDecoder(d, p); err != nil {
				return err
			}
		}
	case "Replace":
		from, err := replacePattern(v.Pattern.String, v.Pattern.Regex, path)
		if err != nil {
			return err
		}
		var to string
		if err := json.Unmarshal(v.Content, &to); err != nil {
			return corrupt(path+".content", "want a string")
		}
		t.decSteps = append(t.decSteps, decStep{kind: decReplace, from: from, to: to})
	case "ByteFallback":
		t.decSteps = append(t.decSteps, decStep{kind: decByteFallback})
	case "Fuse":
		t.decSteps = append(t.decSteps, decStep{kind: decFuse})
	case "Strip":
		var c string
		if err := json.Unmarshal(v.Content, &c); err != nil || utf8.RuneCountInString(c) != 1 {
			return corrupt(path+".content", "want one character")
		}
		if v.Start < 0 || v.Stop < 0 {
			return corrupt(path, "start %d, stop %d", v.Start, v.Stop)
		}
		r, _ := utf8.DecodeRuneInString(c)
		t.decSteps = append(t.decSteps, decStep{kind: decStrip, char: r, start: v.Start, stop: v.Stop})
	default:
		return unsupported(path, "decoder %q", typ)
	}
	return nil
}

// applyConfig reads bos_token, eos_token and pad_token from tokenizer_config.json.
func (t *Tokenizer) applyConfig(data []byte) error {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(data, &cfg); err != nil {
		return corrupt("$", "%v", err)
	}
	// A token the config does not name keeps what the post-processor says.
	get := func(key string, s *string, id *int32) error {
		m, ok := cfg[key]
		if !ok || isNull(m) {
			return nil
		}
		var str string
		if err := json.Unmarshal(m, &str); err != nil {
			var obj struct {
				Content string `json:"content"`
			}
			if err := json.Unmarshal(m, &obj); err != nil {
				return corrupt("$."+key, "want a string or {\"content\": ...}")
			}
			str = obj.Content
		}
		v, ok := t.TokenID(str)
		if !ok {
			return corrupt("$."+key, "token %q is not in the vocabulary", str)
		}
		*s, *id = str, v
		return nil
	}
	sp := &t.special
	if err := get("bos_token", &sp.BOS, &sp.BOSID); err != nil {
		return err
	}
	if err := get("eos_token", &sp.EOS, &sp.EOSID); err != nil {
		return err
	}
	return get("pad_token", &sp.Pad, &sp.PadID)
}
