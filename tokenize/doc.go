// Package tokenize encodes text to token ids with a Hugging Face
// tokenizer.json, giving the ids HF tokenizers 0.23.2 gives (the Rust library
// behind transformers' AutoTokenizer), many times faster.
//
// It implements what the byte-level BPE tokenizers of the Qwen2/Qwen2.5/Qwen3,
// Llama-3/3.1/3.2 and GPT-2 families use: added tokens (special or not, with
// their lstrip, rstrip, single_word and normalized flags), NFC/NFD/NFKC/NFKD
// normalizers, Split (Isolated or Removed) and ByteLevel pre-tokenizers, BPE
// with merges in either format and ignore_merges, TemplateProcessing and
// ByteLevel post-processors, and the ByteLevel decoder. Anything else in a
// tokenizer.json makes Load fail with ErrUnsupported and the JSON path of the
// component ("$.pre_tokenizer.pretokenizers[0]: pre-tokenizer \"Digits\"");
// a malformed file fails with ErrCorrupt. Load never panics on bad input.
//
// # Exactness
//
// The ids are checked against HF tokenizers on every line of a hard 7,439-line
// corpus (testdata/tokenizers/corpus-dev.jsonl.zst) and on 9,000 random probe
// strings for Qwen2.5 and Llama-3.1, with and without special tokens, and on
// synthetic tokenizers for the other features. The traps this needs to get right:
//
//   - The Split regexes use a look-ahead, \s+(?!\S), which Go's regexp cannot
//     express. The regexes of Llama-3, Qwen2 and GPT-2 (PatternLlama3,
//     PatternQwen2, PatternGPT2) have hand-written scanners; any other regex
//     runs on github.com/dlclark/regexp2 (backtracking, slower) after its
//     \p{L}, \p{N}, \s and (?i:...) are rewritten to Oniguruma's meaning. A
//     differential fuzz test holds the scanners to the regexp2 fallback.
//   - HF's regex engine (Oniguruma) uses Unicode 16.0 letter and number
//     classes; Go's unicode package is Unicode 15.0 and misses 4,924 letters
//     and 80 numbers. internal/uclass holds tables generated (go generate)
//     from the classes probed out of HF tokenizers itself.
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
// with the hand-written scanner (an ASCII fast path over bytes), then look
// each pre-token up in a cache of pre-token -> ids; only a miss runs BPE,
// over raw bytes (the vocabulary is re-keyed from byte-level characters to
// bytes at load) with merge ranks keyed by a pair of ids. Each goroutine has
// its own cache (an open-addressing table for short keys, cleared when it
// reaches 65,536 entries), so there are no locks on the hot path.
//
// # Concurrency and memory
//
// A Tokenizer is immutable after Load and safe for concurrent use. Encode,
// AppendEncode and EncodeBatch may be called from any number of goroutines;
// each running goroutine uses one cache state (up to ~7 MB when full) taken
// from a pool that keeps as many states as were ever in use at once.
// AppendEncode does not allocate once its cache is warm (beyond growing dst),
// except to normalize text that is not already normalized, to replace invalid
// UTF-8, or when the pre-tokenizer has no hand-written scanner (a regexp2
// Split, several Splits, or add_prefix_space). Slices returned by Encode and EncodeBatch belong to the
// caller. A loaded Qwen2.5 or Llama-3.1 tokenizer holds about 25 MB of heap.
//
// # Formats
//
// The input is HF's tokenizer.json (JSON; optionally zstd-compressed as
// tokenizer.json.zst), and tokenizer_config.json for the bos/eos/pad names:
//
//	tokenizer.json
//	{ "added_tokens":   [ {id, content, single_word, lstrip, rstrip, normalized, special} ... ],
//	  "normalizer":     null | {type: NFC|NFD|NFKC|NFKD|Sequence, normalizers: [...]},
//	  "pre_tokenizer":  null | {type: Sequence, pretokenizers: [...]}
//	                    | {type: Split, pattern: {Regex|String}, behavior: Isolated|Removed, invert: false}
//	                    | {type: ByteLevel, add_prefix_space, use_regex},   (required, last)
//	  "model":          {type: BPE, vocab: {token: id}, merges: ["a b" | ["a","b"]],
//	                     ignore_merges, unk_token, fuse_unk, byte_fallback: false, dropout: null},
//	  "post_processor": null | ByteLevel | TemplateProcessing{single, special_tokens} | Sequence,
//	  "decoder":        null | ByteLevel | Sequence[ByteLevel],
//	  "truncation": null, "padding": null }
//
// Byte-level tokens spell each byte with one character: the printable bytes
// ! to ~, ¡ to ¬ and ® to ÿ as themselves, the 68 others as U+0100 onwards
// (space is "Ġ", newline "Ċ").
package tokenize
