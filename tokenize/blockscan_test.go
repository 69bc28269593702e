package tokenize

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferryml/ferry/tokenize/internal/classify"
	"github.com/ferryml/ferry/tokenize/internal/uclass"
)

// TestClassify checks the class masks of every byte, at every position of a
// block, against byteClass, and byteClass against uclass, for the pure-Go
// classifier and the SIMD one where this machine has it.
func TestClassify(t *testing.T) {
	for c := range 256 {
		k := byteClass[c]
		if c < 0x80 && k&cX == 0 {
			want := map[uint8]uclass.Class{cL: uclass.Letter, cD: uclass.Number, cS: uclass.Space,
				cS | cSP: uclass.Space, cNL: uclass.Space, cP: uclass.Other}[k&^cLo]
			if uclass.ASCII[c] != want {
				t.Errorf("byte %#x: class %d, uclass %d", c, k, uclass.ASCII[c])
			}
		}
		for pos := range 64 {
			var buf [64]byte
			for i := range buf {
				buf[i] = byte(c + 37*i)
			}
			buf[pos] = byte(c)
			for _, f := range classifiers() {
				m := f.fn(&buf)
				got := uint8(0)
				for _, f := range []struct {
					mask uint64
					cls  uint8
				}{{m.L, cL}, {m.D, cD}, {m.S, cS}, {m.SP, cSP}, {m.NL, cNL}, {m.X, cX}} {
					if f.mask>>pos&1 != 0 {
						got |= f.cls
					}
				}
				if got&(cL|cD|cS|cNL|cX) == 0 {
					got |= cP
				}
				if got != k&^cLo || (m.AP>>pos&1 != 0) != (c == '\'') {
					t.Fatalf("%s: byte %#x at %d: masks give %#x, want %#x", f.name, c, pos, got, k)
				}
			}
		}
	}
}

type classifier struct {
	name string
	fn   func(*[64]byte) classify.Masks
}

// classifiers returns the pure-Go classifier and, where this build and
// machine have it, the SIMD one.
func classifiers() []classifier {
	cs := []classifier{{"go", classify.Go}}
	if classify.SIMD {
		cs = append(cs, classifier{"simd", classify.SIMDArray})
	}
	return cs
}

// blockStarts returns the pre-token starts the block scanner gives for s.
func blockStarts(s string, k scanKind) []int {
	var out []int
	var b blockScanner
	b.reset(s, k)
	for pos := 0; pos < len(s); {
		out = append(out, pos)
		end := b.next(pos)
		if end <= pos {
			panic("no progress")
		}
		pos = end
	}
	return out
}

// scanStarts returns scan's pre-token starts for s: for a scanner of two
// levels, the inner one's within each piece of the outer one, as the encode
// loop runs them without the block scanner.
func scanStarts(s string, k scanKind) []int {
	var out []int
	in := innerScan(k)
	for pos := 0; pos < len(s); {
		if in == scanNone {
			out = append(out, pos)
			pos += scan(k, s[pos:])
			continue
		}
		end := pos + scan(k, s[pos:])
		for ; pos < end; pos += scan(in, s[pos:end]) {
			out = append(out, pos)
		}
	}
	return out
}

// blockKinds are the scanners the block scanner has rules for.
var blockKinds = []scanKind{scanQwen2, scanLlama3, scanDeepSeek, scanGPT2, scanDigitsGPT2, scanO200k, scanTekken}

// checkBlockScan compares the block scanner's starts with scan's on s and
// on s shifted against the block boundaries.
func checkBlockScan(t *testing.T, s string) {
	for _, k := range blockKinds {
		if !hasBlockRules(k) {
			t.Fatalf("kind %d: no block rules", k)
		}
		for _, shift := range []int{0, 1, 2, 3, 61, 62, 63} {
			in := strings.Repeat("a", shift) + s
			got, want := blockStarts(in, k), scanStarts(in, k)
			if len(got) != len(want) {
				t.Fatalf("kind %d, %q: block starts %v, scan %v", k, in, got, want)
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("kind %d, %q: block starts %v, scan %v", k, in, got, want)
				}
			}
		}
	}
}

var blockScanSeeds = []string{
	"Hello, world! It's 12345 o'clock.\n\n### Response:\n  indented\tcode();\r\n",
	"don't 'S 'RE 'll 'LL 've 'm 'd 't 'x '' '  ' 's", "a\n \n  b\n\n\n c  \n", "1234567 89 x1y22z333",
	"(foo) [bar] .,b a .b \tx \t. ''s .'s", "héllo wörld 12٣45 'ſ x\u00a0y \u3000z", "a\x00b\x0bc\x0c\x1cd\x7f",
	"\U0001f600'Lls \U0001f600'ddc", "   ", "\n", "x ", " x", "'", "''s", "a  5 b\t 7\n 8 \n\n9x", "we're WE'RE they'll 'll", "\t\tb  \t.x ..b 5.b", "abc123def4567 8", "x\u4e2d\u6587y 12\u4e2d", "HelloWorld ABCdef aBC I'M don't it's's 'S's x'll'd we'RE a's'", ".\n/x a\n/b\r\n//c .\n\n/\n/d", "\u00e9's \u00e9'LL 'd'd x''s \u00e9'llx \u00e9'dx", strings.Repeat("ab ", 40) + strings.Repeat("9", 70) + strings.Repeat(" ", 70) + "\n" + strings.Repeat(".", 66) + "\n\n",
}

func TestBlockScan(t *testing.T) {
	for _, s := range blockScanSeeds {
		checkBlockScan(t, s)
	}
	for _, s := range alpacaPrompts(t, "")[:200] {
		checkBlockScan(t, s)
	}
	for _, s := range corpusTexts(t) {
		checkBlockScan(t, s)
	}
	for _, r := range readJSONL[struct {
		Text string `json:"text"`
	}](t, filepath.Join("testdata", "probes", "input.jsonl.zst")) {
		checkBlockScan(t, r.Text)
	}
}

// FuzzBlockScan: the block scanner and scan give the same pre-token starts
// on any input, for Qwen2 and Llama-3.
func FuzzBlockScan(f *testing.F) {
	for _, s := range blockScanSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkBlockScan(t, s) })
}

// BenchmarkPreTokens is the pre-token boundaries alone over the bundled
// Alpaca prompts, for each pattern the block scanner has rules for: scan one
// pre-token at a time (both levels of a two-level scanner), or the block
// scanner.
func BenchmarkPreTokens(b *testing.B) {
	texts := alpacaPrompts(b, "")
	n := 0
	for _, s := range texts {
		n += len(s)
	}
	for _, k := range blockKinds {
		name := map[scanKind]string{scanQwen2: "qwen2", scanLlama3: "llama3", scanDeepSeek: "deepseek",
			scanGPT2: "gpt2", scanDigitsGPT2: "digits-gpt2", scanO200k: "o200k", scanTekken: "tekken"}[k]
		in := innerScan(k)
		b.Run("scan/"+name, func(b *testing.B) {
			b.SetBytes(int64(n))
			c0 := cpuSeconds()
			for b.Loop() {
				for _, s := range texts {
					if in != scanNone {
						for pos := 0; pos < len(s); {
							end := pos + scan(k, s[pos:])
							for ; pos < end; pos += scan(in, s[pos:end]) {
							}
						}
						continue
					}
					for pos := 0; pos < len(s); pos += scan(k, s[pos:]) {
					}
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/1e6/(cpuSeconds()-c0), "MB/cpu-s")
		})
		b.Run("block/"+name, func(b *testing.B) {
			b.SetBytes(int64(n))
			c0 := cpuSeconds()
			for b.Loop() {
				for _, s := range texts {
					var bs blockScanner
					bs.reset(s, k)
					for pos := 0; pos < len(s); pos = bs.next(pos) {
					}
				}
			}
			b.ReportMetric(float64(n)*float64(b.N)/1e6/(cpuSeconds()-c0), "MB/cpu-s")
		})
	}
}

// blockFamilies are the fixtures whose pre-tokenizer the block scanner runs.
var blockFamilies = []string{"qwen2.5", "llama3.1", "deepseek-r1", "smollm2", "mistral-nemo", "gpt-oss"}

// checkAppendBlocks compares appendBlocks' ids for s with those of scan's
// pre-tokens, each through appendPiece, from an empty cache and a warm one,
// into dst of several spare capacities (the inner loop writes into it only
// with room for a block).
func checkAppendBlocks(t *testing.T, tok *Tokenizer, s string) {
	t.Helper()
	k := tok.fastScan
	if !hasBlockRules(k) {
		t.Fatalf("scanner %d: no block rules", k)
	}
	ref := newState()
	var want []int32
	starts := scanStarts(s, k)
	for i, p := range starts {
		end := len(s)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		want = tok.appendPiece(want, s[p:end], ref)
	}
	st := newState()
	for round := range 2 { // an empty cache, then a warm one
		for _, spare := range []int{0, 1, 63, 64, 65, 127, 128, 129, len(s) + 128} { // appendBlocks gives takeWords 128 ids of room
			dst := append(make([]int32, 0, 3+spare), 7, 8, 9)
			got := tok.appendBlocks(dst, s, k, st)
			if !slices.Equal(got[:3], []int32{7, 8, 9}) || !slices.Equal(got[3:], want) {
				t.Fatalf("%q (round %d, spare %d):\nappendBlocks %v\nscan         %v", s, round, spare, got, want)
			}
		}
	}
}

func TestAppendBlocks(t *testing.T) {
	texts := slices.Clone(blockScanSeeds)
	prompts := alpacaPrompts(t, "")
	for n := range 150 { // the end of the text at every place in a block
		texts = append(texts, prompts[0][:min(n, len(prompts[0]))])
	}
	texts = append(texts, prompts[:50]...)
	for _, m := range blockFamilies {
		tok := loadModel(t, m)
		for _, s := range texts {
			checkAppendBlocks(t, tok, s)
		}
	}
}

// FuzzAppendBlocks: appendBlocks gives the ids of scan's pre-tokens on any
// input, for every family the block scanner runs.
func FuzzAppendBlocks(f *testing.F) {
	for _, s := range blockScanSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if len(s) > 1024 {
			s = s[:1024]
		}
		for _, m := range blockFamilies {
			checkAppendBlocks(t, loadModel(t, m), s)
		}
	})
}
