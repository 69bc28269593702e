package tokenize

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ferryml/ferry/tokenize/internal/bytestr"
)

func TestAppendEncodeNoAllocs(t *testing.T) {
	texts := []string{
		"### Instruction:\nGive three tips for staying healthy.\n\n### Response:\n1. Eat a balanced diet.<|endoftext|>",
		"東京都は日本の首都です。 It's 2,024 km — ok?\r\n\tdone  ",
		"",
	}
	for _, m := range families {
		tok := loadModel(t, m)
		dst := make([]int32, 0, 1024)
		for _, s := range texts {
			dst = tok.AppendEncode(dst[:0], s, true) // warm the cache
			s := s
			allocs := testing.AllocsPerRun(50, func() {
				dst = tok.AppendEncode(dst[:0], s, true)
			})
			ses := tok.Session()
			allocs = max(allocs, testing.AllocsPerRun(50, func() {
				dst = ses.AppendEncode(dst[:0], s, true)
			}))
			ses.Close()
			// With -tags purego a rewriting normalizer step (prepend,
			// replace) makes a string of its buffer: a copy each.
			want := 0
			if bytestr.Copies {
				for _, n := range tok.norms {
					if !n.isForm {
						want++
					}
				}
			}
			if allocs > float64(want) {
				t.Errorf("%s: AppendEncode(%q) allocates %v times per call, want at most %d", m, s, allocs, want)
			}
		}
	}
}

// TestSession: a Session's ids are AppendEncode's; it holds one state from
// the pool until Close (so a run of calls takes no other), gives it back once
// however often Close is called, and still encodes after Close.
func TestSession(t *testing.T) {
	texts := corpusTexts(t)[:corpusStep(400, 100)]
	for _, m := range models {
		tok := loadModel(t, m)
		tok.AppendEncode(nil, "warm", true) // one idle state in the pool
		free := func() (n int) {
			for i := range tok.states.shards {
				n += int(tok.states.shards[i].n.Load())
			}
			return n
		}
		idle := free()
		ses := tok.Session()
		if got := free(); got != idle-1 {
			t.Fatalf("%s: %d idle states in a Session, want %d", m, got, idle-1)
		}
		var got []int32
		for _, s := range texts {
			got = ses.AppendEncode(got[:0], s, true)
			if want := tok.Encode(s, true); !slices.Equal(got, want) {
				t.Fatalf("%s: Session.AppendEncode(%q) = %v, want %v", m, s, got, want)
			}
		}
		during := free() // tok.Encode's state joined the pool
		ses.Close()
		ses.Close()
		if got := free(); got != during+1 {
			t.Fatalf("%s: %d idle states after Close, want %d", m, got, during+1)
		}
		if got, want := ses.AppendEncode(nil, texts[0], true), tok.Encode(texts[0], true); !slices.Equal(got, want) {
			t.Fatalf("%s: AppendEncode after Close = %v, want %v", m, got, want)
		}
	}
}

func TestEncodeBatchOrder(t *testing.T) {
	texts := corpusTexts(t)[:corpusStep(600, 150)]
	for _, m := range models {
		tok := loadModel(t, m)
		var want [][]int32
		for _, s := range texts {
			want = append(want, tok.Encode(s, true))
		}
		for _, threads := range []int{0, 1, 3, 16} {
			got := tok.EncodeBatch(texts, true, threads)
			if len(got) != len(texts) {
				t.Fatalf("%s threads=%d: %d results", m, threads, len(got))
			}
			for i := range got {
				if !slices.Equal(got[i], want[i]) {
					t.Fatalf("%s threads=%d: text %d differs", m, threads, i)
				}
			}
		}
		if got := tok.EncodeBatch(nil, true, 4); len(got) != 0 {
			t.Errorf("EncodeBatch(nil) = %v", got)
		}
	}
}

// TestConcurrentEncode hammers one Tokenizer from many goroutines (run it
// with -race) and checks the ids against HF's.
func TestConcurrentEncode(t *testing.T) {
	tok := loadModel(t, "llama3.1")
	texts := corpusTexts(t)
	want := goldenIDs(t, "llama3.1", true)
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := range 8 {
		wg.Go(func() {
			var dst []int32
			for i := g; i < len(texts); i += corpusStep(37, 149) {
				dst = tok.AppendEncode(dst[:0], texts[i], true)
				if !slices.Equal(dst, want[i]) {
					errs <- fmt.Sprintf("goroutine %d line %d differs", g, i+1)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestDecode(t *testing.T) {
	tok := loadModel(t, "qwen2.5")
	ids := tok.Encode("<|im_start|>user\nhé<|im_end|><tool_call>", false)
	if got := tok.Decode(ids, false); got != "<|im_start|>user\nhé<|im_end|><tool_call>" {
		t.Errorf("Decode = %q", got)
	}
	// <tool_call> is special=false: kept by skipSpecial, as in HF.
	if got := tok.Decode(ids, true); got != "user\nhé<tool_call>" {
		t.Errorf("Decode(skipSpecial) = %q", got)
	}
	// "é" is two bytes; cut after the first and the rest is U+FFFD.
	e := tok.Encode("é", false)
	if len(e) != 1 {
		t.Fatalf("é = %v", e)
	}
	half, _ := tok.TokenID("Ã") // byte 0xC3
	if got := tok.Decode([]int32{half}, false); got != "\uFFFD" {
		t.Errorf("Decode(0xC3) = %q", got)
	}
	if got := tok.Decode([]int32{-5, 1 << 30, half, 151643}, true); got != "\uFFFD" {
		t.Errorf("Decode with unknown ids = %q", got)
	}
}

func TestInvalidUTF8(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a\xffb", "a\uFFFDb"},
		{"\xe2\x82", "\uFFFD"},                 // a cut 3-byte sequence is one U+FFFD
		{"\xe2\x82a", "\uFFFDa"},               //
		{"\xed\xa0\x80", "\uFFFD\uFFFD\uFFFD"}, // a surrogate: ED, then A0 and 80 are each invalid
		{"\xf0\x9f\x98", "\uFFFD"},
		{"\xf4\x90\x80\x80", "\uFFFD\uFFFD\uFFFD\uFFFD"},
		{"\xc0\xaf", "\uFFFD\uFFFD"},
		{"ok", "ok"},
	} {
		if got := ValidUTF8(tc.in); got != tc.want {
			t.Errorf("ValidUTF8(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	tok := loadModel(t, "llama3.1")
	if got, want := tok.Encode("a\xff\xe2\x82b", true), tok.Encode("a\uFFFD\uFFFDb", true); !slices.Equal(got, want) {
		t.Errorf("invalid UTF-8: %v, want %v", got, want)
	}
}

// TestBPEMergeLoops checks that the O(n²) and the heap merge loops agree, on
// every word of part of the corpus and on long repetitive words.
func TestBPEMergeLoops(t *testing.T) {
	words := []string{strings.Repeat("a", 300), strings.Repeat("ab", 100), strings.Repeat("e\u0301", 60), strings.Repeat("東京", 40)}
	for i, s := range corpusTexts(t) {
		if i%corpusStep(4, 32) != 0 {
			continue
		}
		for len(s) > 0 {
			n := scan(scanLlama3, s)
			if n > 1 && n < 400 {
				words = append(words, s[:n])
			}
			s = s[n:]
		}
	}
	for _, m := range models {
		bm := &loadModel(t, m).model // the merge loops do not read ignoreMerges
		bm.upgrading.Wait()          // mergeTiny reads the merges' filter (the heap does not)
		var sc scratch
		for _, w := range words {
			ids := bm.initial(&sc, w)
			small := bm.mergeSmall(nil, slices.Clone(ids), "", &sc)
			ids = bm.initial(&sc, w)
			heap := bm.mergeHeap(nil, slices.Clone(ids), &sc)
			if !slices.Equal(small, heap) {
				t.Fatalf("%s %q: small %v, heap %v", m, w, small, heap)
			}
			if bm.bytePairs != nil { // the first round from the byte-pair table
				ids = bm.initial(&sc, w)
				if pairs := bm.mergeSmall(nil, slices.Clone(ids), w, &sc); !slices.Equal(pairs, heap) {
					t.Fatalf("%s %q: small with byte pairs %v, heap %v", m, w, pairs, heap)
				}
			}
			// appendMerged: mergeTiny from the word's bytes up to tinyWord
			if got := bm.appendMerged(nil, w, &sc); !slices.Equal(got, heap) {
				t.Fatalf("%s %q: appendMerged %v, heap %v", m, w, got, heap)
			}
		}
	}
}

// TestMergeFilter: the merges' filter, built for a parsed tokenizer and by
// upgradeTables for a compiled one, has every pair of the table (else
// mergeTiny would miss its merge) and answers no for most absent pairs; the
// zero filter (before upgradeTables) may have anything.
func TestMergeFilter(t *testing.T) {
	var zero mergeFilter
	if !zero.mayHave(pairKey(1, 2) | mergeUsed) {
		t.Fatal("the zero filter has no pair")
	}
	for _, m := range families {
		for _, compiled := range []bool{false, true} {
			tok := loadModel(t, m)
			if compiled {
				t.Setenv("FERRY_TOKENIZER_CACHE", t.TempDir())
				if _, err := Load(filepath.Join(fixtures, m)); err != nil { // writes the cache
					t.Fatal(err)
				}
				var err error
				if tok, err = Load(filepath.Join(fixtures, m)); err != nil || !tok.compiled {
					t.Fatalf("%s: Load: %v, compiled %v", m, err, tok != nil && tok.compiled)
				}
			}
			tok.model.upgrading.Wait()
			ft := tok.model.tables()
			if len(ft.filter.bits) == 0 {
				t.Fatalf("%s (compiled %v): no merges filter", m, compiled)
			}
			for _, s := range ft.merges.slots {
				if k := ft.merges.pairOf(s); s != 0 && !ft.filter.mayHave(k) {
					t.Fatalf("%s (compiled %v): the filter lacks pair %#x", m, compiled, k&^mergeUsed)
				}
			}
			rng := rand.New(rand.NewPCG(1, 2))
			n := int32(tok.VocabSize())
			absent, set := 0, 0
			for absent < 100_000 {
				key := pairKey(rng.Int32N(n), rng.Int32N(n))
				if _, ok := ft.merges.get(key); ok {
					continue
				}
				absent++
				if ft.filter.mayHave(key | mergeUsed) {
					set++
				}
			}
			if set > absent/8 {
				t.Errorf("%s (compiled %v): %d of %d absent pairs pass the filter", m, compiled, set, absent)
			}
		}
	}
}

// TestMergeTableGet holds get to a map of the table's slots: every key of
// the two models' merges, random pairs, and small tables filled to their
// load factor with keys that all start at the last slot, so that probes wrap
// past the end.
func TestMergeTableGet(t *testing.T) {
	for _, m := range models {
		mt := &loadModel(t, m).model.merges
		want := map[uint64]uint64{}
		var probes []uint64
		vm := mt.valMask
		for _, s := range mt.slots {
			if s != 0 {
				k := mt.pairOf(s) &^ mergeUsed
				want[k] = s & vm
				probes = append(probes, k)
			}
		}
		rng := rand.New(rand.NewPCG(3, 4))
		for range 100_000 {
			probes = append(probes, pairKey(rng.Int32N(1<<17), rng.Int32N(1<<17)))
		}
		for _, k := range probes {
			v, in := want[k]
			merged := v >> mt.placeBits
			if mt.side != nil && in {
				merged = uint64(mt.side[v])
			}
			got, ok := mt.get(k)
			if ok != in || ok && (got>>32 != v || uint64(uint32(got)) != merged) {
				t.Fatalf("%s: get(%#x) = %#x, %v; want order %#x, %v", m, k, got, ok, v, in)
			}
		}
	}
	for n := 1; n <= 12; n++ { // 16 or 32 slots, at most 3/4 full
		size := 1 << max(4, bits.Len(uint(n+n/3)))
		shift := 64 - bits.TrailingZeros(uint(size))
		var kvs []mergeKV
		var extra []uint64
		for k := uint64(0); len(kvs) < n; k++ {
			if (k|mergeUsed)*mergeMul>>shift == uint64(size-1) {
				kvs = append(kvs, mergeKV{k, int32(len(kvs))})
			}
			if len(extra) < 4*n {
				extra = append(extra, k)
			}
		}
		mt, err := newMergeTable(kvs, 1<<16)
		if err != nil || len(mt.slots) != size {
			t.Fatalf("%d keys: %d slots, %v", n, len(mt.slots), err)
		}
		checkMergeTable(t, fmt.Sprintf("%d keys at the last slot", n), &mt, kvs, extra)
	}
}

// FuzzBPEMergeLoops: the merge loops (mergeTiny up to 16 ids, through the
// scratch's pair cache, mergeSmall's own loop, the heap) agree on any word,
// of a byte-level family and of a character-level one, from the ids or from
// the byte-pair table, and with appendMerged (from the word's bytes).
func FuzzBPEMergeLoops(f *testing.F) {
	for _, s := range []string{" unbelievable", "aaaaaaaaaaaaaaaaaaaaa", " 東京タワー", "e\u0301e\u0301", "\xff\xfe abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, w string) {
		if len(w) > heapThreshold+16 {
			w = w[:heapThreshold+16]
		}
		for _, m := range []string{"qwen2.5", "llama2"} {
			bm := &loadModel(t, m).model // the merge loops do not read ignoreMerges
			var sc scratch
			ids := bm.initial(&sc, w)
			if len(ids) < 2 {
				continue // the heap loop takes long words only
			}
			heap := bm.mergeHeap(nil, slices.Clone(ids), &sc)
			ids = bm.initial(&sc, w)
			if small := bm.mergeSmall(nil, slices.Clone(ids), "", &sc); !slices.Equal(small, heap) {
				t.Fatalf("%s %q: small %v, heap %v", m, w, small, heap)
			}
			if bm.bytePairs != nil {
				ids = bm.initial(&sc, w)
				if pairs := bm.mergeSmall(nil, slices.Clone(ids), w, &sc); !slices.Equal(pairs, heap) {
					t.Fatalf("%s %q: small with byte pairs %v, heap %v", m, w, pairs, heap)
				}
			}
			if got := bm.appendMerged(nil, w, &sc); !slices.Equal(got, heap) {
				t.Fatalf("%s %q: appendMerged %v, heap %v", m, w, got, heap)
			}
		}
	})
}

// TestDivesAkuru pins what HF tokenizers 0.23.2 does with U+11935 U+11930
// and U+11938 under NFC (probed with the Node binding): it leaves both as
// they are, where golang.org/x/text composes the pair.
func TestDivesAkuru(t *testing.T) {
	tok := loadModel(t, "qwen2.5")
	pair, one := []int32{128240, 97, 113, 128240, 97, 108}, []int32{128240, 97, 116}
	for _, tc := range []struct {
		in   string
		want []int32
	}{
		{"\U00011935\U00011930", pair},
		{" \U00011935\U00011930", append([]int32{220}, pair...)},
		{"\U00011938", one},
		{"x\U00011938", append([]int32{87}, one...)},
		{"\U00011935\U00011930\U00011938\U00011935\U00011930", slices.Concat(pair, one, pair)},
	} {
		if got := tok.Encode(tc.in, false); !slices.Equal(got, tc.want) {
			t.Errorf("%+q: got %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestSPView checks which SentencePiece-style tokenizers take the path that
// reads spaces as "▁" without writing the normalized text out (the one
// TestAppendEncodeNoAllocs holds to zero allocations).
func TestSPView(t *testing.T) {
	for m, want := range map[string]spViewKind{"tinyllama": spViewNorm, "phi3": spViewNorm, "mistral-v0.3": spViewMeta, "llama2": spViewNone, "qwen2.5": spViewNone} {
		if got := loadModel(t, m).spView; got != want {
			t.Errorf("%s: spView %d, want %d", m, got, want)
		}
	}
}

// TestSpecialFamilies checks the BOS the post-processor adds and its name:
// Llama-2's <s> is normalized (HF gives id 1 back as "▁<s>"), yet Special
// names it by its content.
func TestSpecialFamilies(t *testing.T) {
	for m, want := range map[string]string{"llama2": "<s>", "tinyllama": "<s>", "mistral-v0.3": "<s>", "mistral-nemo": "<s>", "phi3": ""} {
		sp := loadModel(t, m).Special()
		if sp.BOS != want || sp.AddBOS != (want != "") || want != "" && sp.BOSID != 1 {
			t.Errorf("%s: Special = %+v, want BOS %q (id 1)", m, sp, want)
		}
	}
	if tok, _ := loadModel(t, "llama2").Token(1); tok != "▁<s>" {
		t.Errorf("llama2: Token(1) = %q, want HF's \"▁<s>\"", tok)
	}
}

// TestPostProcessorIDs checks that the ids PostProcessorIDs reports are what
// AppendEncode adds around a text with addSpecial, and that Special agrees.
func TestPostProcessorIDs(t *testing.T) {
	for m, want := range map[string][2]int{"llama3.1": {1, 0}, "qwen2.5": {0, 0}, "llama2": {1, 0}, "phi3": {0, 0}} {
		tok := loadModel(t, m)
		pre, suf := tok.PostProcessorIDs()
		if len(pre) != want[0] || len(suf) != want[1] {
			t.Errorf("%s: PostProcessorIDs = %v, %v; want %d and %d ids", m, pre, suf, want[0], want[1])
		}
		if sp := tok.Special(); sp.AddBOS != (len(pre) > 0) || sp.AddEOS != (len(suf) > 0) || len(pre) == 1 && sp.BOSID != pre[0] {
			t.Errorf("%s: Special %+v disagrees with PostProcessorIDs %v, %v", m, sp, pre, suf)
		}
		for _, text := range []string{"", "a", "Hello world<|eot_id|>"} {
			got := tok.Encode(text, true)
			exp := slices.Concat(pre, tok.Encode(text, false), suf)
			if !slices.Equal(got, exp) {
				t.Errorf("%s: Encode(%q, true) = %v, want %v", m, text, got, exp)
			}
		}
		pre2, _ := tok.PostProcessorIDs()
		if len(pre) > 0 {
			pre[0] = -7
			if pre2[0] == -7 {
				t.Errorf("%s: PostProcessorIDs shares its slices", m)
			}
		}
	}
}
