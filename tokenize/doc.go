// Package tokenize encodes text to token ids with a Hugging Face
// tokenizer.json, giving the ids HF tokenizers 0.23 gives (the Rust library
// behind transformers' AutoTokenizer), many times faster.
//
// It implements what these tokenizer families use:
//
//   - byte-level BPE: Qwen2/2.5/3, Llama-3.x, GPT-2, DeepSeek-V3/R1, Phi-4,
//     OLMo-2, SmolLM2, Mistral-NeMo (Tekken) and gpt-oss (o200k): Split
//     (Isolated, or Removed with or without invert), Digits and ByteLevel
//     pre-tokenizers, the ByteLevel decoder;
//   - SentencePiece-style BPE: Llama-2, TinyLlama, Mistral v0.3, Phi-3: the
//     Prepend and Replace normalizers or the Metaspace pre-tokenizer
//     (prepend_scheme always/first/never, or the older add_prefix_space;
//     split), a vocabulary of characters with byte_fallback (<0xNN>
//     tokens), unk_token and fuse_unk, and the Replace, ByteFallback, Fuse
//     and Strip decoders. The "legacy" setting of transformers is not in
//     tokenizer.json: it shows there as prepend_scheme "first" (legacy=false)
//     or a Prepend normalizer (legacy=true), both implemented;
//
// and for all: added tokens (special or not, with their lstrip, rstrip,
// single_word and normalized flags), NFC/NFD/NFKC/NFKD normalizers, BPE with
// merges in either format and ignore_merges, TemplateProcessing (the BOS of
// Llama and Mistral) and ByteLevel post-processors. Anything else in a
// tokenizer.json makes Load fail with ErrUnsupported and the JSON path of the
// component ("$.pre_tokenizer.pretokenizers[0]: pre-tokenizer \"Punctuation\"");
// a malformed file fails with ErrCorrupt. Load never panics on bad input.
//
// # Exactness
//
// The ids are checked against HF tokenizers on every line of a hard 7,439-line
// corpus (testdata/tokenizers/corpus-dev.jsonl.zst) for the twelve real
// tokenizers in testdata/tokenizers, with and without special tokens, and so
// is Decode against HF's decode; on 9,000 random probe strings for Qwen2.5
// and Llama-3.1; and on synthetic tokenizers for the other features. The
// traps this needs to get right:
//
//   - The Split regexes use a look-ahead, \s+(?!\S), which Go's regexp cannot
//     express. The regexes of Llama-3 (also Phi-4's and OLMo-2's), Qwen2,
//     GPT-2, o200k, Tekken and DeepSeek's three Splits (PatternLlama3,
//     PatternQwen2, PatternGPT2, PatternO200k, PatternTekken,
//     PatternDeepSeek...) and SmolLM2's Digits + ByteLevel have hand-written
//     scanners; any other regex runs on github.com/dlclark/regexp2
//     (backtracking, slower) after its \p{..}, \s and (?i:...) are rewritten
//     to Oniguruma's meaning. A differential fuzz test holds the scanners to
//     the regexp2 fallback. The o200k letter alternatives ([..]*[..]+ over
//     overlapping classes) are matched with the engine's backtracking order.
//   - HF's regex engine (Oniguruma) uses Unicode 16.0 classes; Go's unicode
//     package is Unicode 15.0 and misses 4,924 letters and 80 numbers.
//     internal/uclass holds tables generated (go generate) from the classes
//     probed out of HF tokenizers itself: \p{L}, \p{N}, \s, the general
//     categories \p{Lu} ... \p{S}, and Rust's char::is_numeric for Digits.
//   - SentencePiece-style: Metaspace's "first" prepends ▁ only to the text
//     before the first added token; Prepend prepends to every piece between
//     added tokens; a pending unk comes after the byte_fallback tokens of the
//     next character; a normalized added token (Llama-2's <s>) is matched in
//     the normalized text ("▁<s>") and HF decodes it as that, not special.
//   - (?i:'s) also matches 's with U+017F LATIN SMALL LETTER LONG S.
//   - NFC: golang.org/x/text agrees with HF except around U+11938 (Unicode
//     13), which HF's older tables do not know: HF neither composes U+11935
//     U+11930 into it nor decomposes it; normalizeLikeHF does the same.
//   - NFC/NFKC/NFD/NFKD: golang.org/x/text writes the stream-safe text format
//     (U+034F COMBINING GRAPHEME JOINER after 30 consecutive non-starters);
//     HF does not, and sorts a run of any length by combining class and
//     composes across it. Where x/text inserts a CGJ, normalizeUnbounded
//     redoes the string with the plain UAX #15 algorithm (x/text's data).
//   - Added tokens are found before normalization and pre-tokenization with
//     leftmost-longest matching, also when special is false; their ids are
//     assigned the way HF registers them on load, not read from the file.
//   - ignore_merges (Llama-3): a pre-token found whole in the vocabulary is
//     one id, before any merge.
//   - Invalid UTF-8 input is replaced by U+FFFD per maximal subpart first, as
//     Python's and JavaScript's UTF-8 decoders do before HF sees the text.
//
// github.com/sugarme/tokenizer (v0.3.0), the Go port of HF tokenizers, is not
// usable for this: it panics on these files (Go's regexp has no look-ahead),
// and with work-arounds it matches HF on only 33-87% of corpus lines, drops
// special tokens found in the text, ignores ignore_merges, and is 15-60x
// slower than HF.
//
// # Speed
//
// Encoding is: find added tokens (a byte trie, skipped to candidate bytes
// with IndexByte), normalize (a quick check first), split into pre-tokens
// with the hand-written scanner (an ASCII fast path over bytes; for the
// byte-level families' patterns on a CPU with AVX2, the block scanner: 64
// bytes classified at once by internal/classify and the pre-token starts of
// the block derived with mask arithmetic, blockscan.go), then look each
// short pre-token (a key of its length and two masked words read from the
// text) up in the model's word table: every vocabulary word of up to 16
// bytes that BPE leaves whole (with ignore_merges, every one), its key
// inline, 16-byte slots for keys of up to 12 bytes (24-byte ones for the
// few longer) probed from the first inline (with the block scanner, by an
// inner loop over a block's known starts that calls nothing and writes ids
// into dst's spare capacity, appendBlocks). A word is found
// there before it was ever seen, so most new words of a cold pass cost no
// BPE (Load runs BPE over every vocabulary word once, ~60 ms for Qwen2.5,
// and the compiled cache keeps the table). Other pre-tokens go to a cache
// of pre-token -> ids (an open-addressing table of 32-byte slots cleared
// when it reaches 262,144 entries, so that a corpus's distinct words stay
// cached: the 52K Alpaca prompts have ~72K; for a character-level model, a
// 65,536-entry direct-mapped front table before it that stays in L2); only
// a miss runs BPE, over raw bytes (the vocabulary is re-keyed from
// byte-level characters to bytes at load) with merge ranks in a flat
// open-addressing table keyed by a pair of ids, and a new word's first
// round of byte pairs read from a 65,536-entry table that stays in the CPU
// caches. A long miss that is a vocabulary word BPE leaves whole takes that
// word's id without BPE; with ignore_merges (Llama-3) every vocabulary word
// is one id anyway. Each goroutine has its own
// cache, so there are no locks on the hot path. SentencePiece-style files
// have no pre-tokenizer (BPE runs over the whole text between added tokens);
// where no token has "▁" after another character (all four real ones) the
// text is cut before each run of "▁", which gives the same ids, so words hit
// the cache too; spaces are read as "▁" without writing the normalized text
// out.
//
// # Load and the compiled cache
//
// Parsing a tokenizer.json takes a few hundred milliseconds, most of it
// the model's vocab and merges (Llama-3.1's 280,000 merges are resolved to
// ids through string lookups). Load keeps the tables it builds from them in
// a compiled file named after the SHA-256 of the tokenizer file's bytes,
// under $FERRY_TOKENIZER_CACHE when set ("off" turns the cache off), else
// $FERRY_CACHE/tokenize, else ~/.cache/ferry/tokenize; a later Load of the
// same bytes reads the tables from it as they are (no parsing, no hashing
// of strings; on little-endian machines they are used in place) and parses
// only the rest of tokenizer.json (a few kilobytes), so the tokenizer is
// the same, field for field (TestCompiledSame). The file is untrusted
// input: Load uses it only when its magic, version, source SHA-256, CRC-32C
// checksums and every length, offset and id in it check out (FuzzCompiled);
// a stale, corrupt or unreadable file, or a cache directory that cannot be
// made or written, makes Load parse tokenizer.json as before (and write the
// file again where it can), never fail. Files are written to a temporary
// name and renamed, so concurrent Loads never read half a file. Beside
// the compiled files, a source index file for each tokenizer file path
// (56 bytes: its size, modification time and last SHA-256) lets Load read
// the compiled file while it hashes the source, where it hashed first: the
// file is kept only when the hash is the one the index named, so the index
// saves time and never decides what is used (TestCompiledIndex). The layout
// is drawn in compiled.go. A file is about 11 MB (Qwen2.5) or 14 MB
// (Llama-3.1); nothing removes old ones. Where the system can, Load maps the
// file read-only and the token strings point into it, so a Load from the
// cache takes ~10-15 ms in a fresh process; the mapping stays for the life of
// the process (address space, not memory: the pages are the file cache's).
// Replace a cache file only by rename, as Load does: truncating a mapped
// file in place would crash the processes that use it (SIGBUS).
//
// # Concurrency and memory
//
// A Tokenizer is immutable after Load and safe for concurrent use. Encode,
// AppendEncode and EncodeBatch may be called from any number of goroutines;
// each running goroutine uses one cache state (up to ~20 MB when full) taken
// from a pool that keeps as many states as were ever in use at once. A
// Session holds one state across a goroutine's run of calls (as EncodeBatch's
// goroutines do), which saves each call the pool's atomic operations.
// AppendEncode does not allocate once its cache is warm (beyond growing dst),
// except to normalize text that is not already normalized, to replace invalid
// UTF-8, when the pre-tokenizer has no hand-written scanner (a regexp2
// Split, several Splits, or add_prefix_space), or when a SentencePiece-style
// file has a Metaspace with split. The normalized text of Prepend and
// Replace (Llama-2, whose normalized added tokens are matched in it) is
// written into per-goroutine buffers (internal/bytestr). Slices returned by Encode
// and EncodeBatch belong to the caller. A loaded Qwen2.5 or Llama-3.1
// tokenizer holds about 25 MB of heap.
//
// # Formats
//
// The input is HF's tokenizer.json (JSON; optionally zstd-compressed as
// tokenizer.json.zst), and tokenizer_config.json for the bos/eos/pad names:
//
//	tokenizer.json
//	{ "added_tokens":   [ {id, content, single_word, lstrip, rstrip, normalized, special} ... ],
//	  "normalizer":     null | {type: NFC|NFD|NFKC|NFKD|Sequence, normalizers: [...]}
//	                    | {type: Prepend, prepend} | {type: Replace, pattern: {String}, content},
//	  "pre_tokenizer":  null | {type: Sequence, pretokenizers: [...]}
//	                    | {type: Split, pattern: {Regex|String}, behavior: Isolated|Removed, invert}
//	                    | {type: Digits, individual_digits}
//	                    | {type: ByteLevel, add_prefix_space, use_regex},   (last)
//	                    | {type: Metaspace, replacement, prepend_scheme | add_prefix_space, split},  (alone)
//	  "model":          {type: BPE, vocab: {token: id}, merges: ["a b" | ["a","b"]],
//	                     ignore_merges, unk_token, fuse_unk, byte_fallback, dropout: null},
//	  "post_processor": null | ByteLevel | TemplateProcessing{single, special_tokens} | Sequence,
//	  "decoder":        null | ByteLevel | Replace | ByteFallback | Fuse | Strip | Sequence[...],
//	  "truncation": null, "padding": null }
//
// Without a ByteLevel pre-tokenizer the vocabulary's tokens are text
// (SentencePiece-style: "▁the", "<0x0A>"). Byte-level tokens spell each byte with one character: the printable bytes
// ! to ~, ¡ to ¬ and ® to ÿ as themselves, the 68 others as U+0100 onwards
// (space is "Ġ", newline "Ċ").
package tokenize
