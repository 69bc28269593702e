package uclass

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestTablesMatchSource checks every code point against the probe file the
// tables are generated from.
func TestTablesMatchSource(t *testing.T) {
	f, err := os.Open("../../../testdata/tokenizers/onig-unicode-classes.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := make([]Class, 0x110000)
	counts := map[Class]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Fields(line)
		c := map[string]Class{"L": Letter, "N": Number, "S": Space}[fields[0]]
		for _, r := range fields[3:] {
			lo, hi, ok := strings.Cut(r, "..")
			if !ok {
				hi = lo
			}
			a, _ := strconv.ParseUint(lo, 16, 32)
			b, _ := strconv.ParseUint(hi, 16, 32)
			for x := a; x <= b; x++ {
				want[x] = c
				counts[c]++
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if counts[Letter] != 141028 || counts[Number] != 1911 || counts[Space] != 25 {
		t.Fatalf("source counts %v, want 141028 letters, 1911 numbers, 25 spaces", counts)
	}
	bad := 0
	for r := rune(0); r < 0x110000; r++ {
		if got := Of(r); got != want[r] {
			if bad++; bad < 10 {
				t.Errorf("Of(U+%04X) = %d, want %d", r, got, want[r])
			}
		}
	}
	for _, r := range []rune{-1, 0x110000, 0x7fffffff} {
		if Of(r) != Other {
			t.Errorf("Of(%d) = %d, want Other", r, Of(r))
		}
	}
	for i := range ASCII {
		if ASCII[i] != want[i] {
			t.Errorf("ASCII[%d] = %d, want %d", i, ASCII[i], want[i])
		}
	}
}

// TestUnicode16 checks the facts that make these tables necessary: Go's
// unicode package (Unicode 15) lacks letters and numbers HF tokenizers knows,
// has none it lacks, and agrees on white space.
func TestUnicode16(t *testing.T) {
	missingL, missingN := 0, 0
	for r := rune(0); r < 0x110000; r++ {
		goL, goN, goS := unicode.IsLetter(r), unicode.IsNumber(r), unicode.IsSpace(r)
		c := Of(r)
		if goL && c != Letter || goN && c != Number {
			t.Errorf("U+%04X: Go says letter=%v number=%v, table says %d", r, goL, goN, c)
		}
		if goS != (c == Space) {
			t.Errorf("U+%04X: Go IsSpace=%v, table says %d", r, goS, c)
		}
		if c == Letter && !goL {
			missingL++
		}
		if c == Number && !goN {
			missingN++
		}
	}
	if unicode.Version == "15.0.0" && (missingL != 4924 || missingN != 80) {
		t.Errorf("Go lacks %d letters and %d numbers, want 4924 and 80", missingL, missingN)
	}
	if Of(0x10D4A) != Letter { // GARAY CAPITAL LETTER A, new in Unicode 16
		t.Error("U+10D4A is not a letter")
	}
}

// TestCategoriesMatchSource checks every code point against the category
// probe file, and that the five letter categories make up \p{L} exactly.
func TestCategoriesMatchSource(t *testing.T) {
	f, err := os.Open("../../../testdata/tokenizers/onig-unicode-categories.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := make([]Category, 0x110000)
	numeric := make([]bool, 0x110000)
	names := map[string]Category{"Lu": CatUpper, "Ll": CatLower, "Lt": CatTitle, "Lm": CatModifier, "Lo": CatOtherLetter, "M": CatMark, "P": CatPunct, "S": CatSymbol}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	classes := 0
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		fields := strings.Fields(line)
		classes++
		for _, r := range fields[3:] {
			lo, hi, ok := strings.Cut(r, "..")
			if !ok {
				hi = lo
			}
			a, _ := strconv.ParseUint(lo, 16, 32)
			b, _ := strconv.ParseUint(hi, 16, 32)
			for x := a; x <= b; x++ {
				if fields[0] == "D" {
					numeric[x] = true
				} else {
					want[x] = names[fields[0]]
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if classes != 9 {
		t.Fatalf("%d classes in the source, want 9", classes)
	}
	bad := 0
	for r := rune(0); r < 0x110000; r++ {
		c := Cat(r)
		isLetter := c >= CatUpper && c <= CatOtherLetter
		if c != want[r] || IsNumeric(r) != numeric[r] || isLetter != (Of(r) == Letter) {
			if bad++; bad < 10 {
				t.Errorf("U+%04X: Cat %d IsNumeric %v Of %d, want Cat %d IsNumeric %v", r, c, IsNumeric(r), Of(r), want[r], numeric[r])
			}
		}
	}
	if Cat(-1) != CatOther || Cat(0x110000) != CatOther || IsNumeric(0x110000) {
		t.Error("invalid code points")
	}
}
