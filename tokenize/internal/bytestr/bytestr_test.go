package bytestr

import "testing"

func TestString(t *testing.T) {
	for _, s := range []string{"", "a", "▁hello▁world"} {
		if got := String([]byte(s)); got != s {
			t.Errorf("String(%q) = %q", s, got)
		}
	}
}

func TestLoad64(t *testing.T) {
	s := "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a"
	for i, want := range []uint64{0x0807060504030201, 0x0908070605040302, 0x0a09080706050403} {
		if got := Load64(s, i); got != want {
			t.Errorf("Load64(s, %d) = %#x, want %#x", i, got, want)
		}
	}
}

func TestTriple(t *testing.T) {
	s := []uint64{1, 2, 3, 4, 5, 6, 7}
	for i := range uint64(5) {
		if got := *Triple(s, i); got != [3]uint64{i + 1, i + 2, i + 3} {
			t.Errorf("Triple(s, %d) = %v", i, got)
		}
	}
	p := Triple(s, 3)
	p[1] = 9
	if s[4] != 9 {
		t.Errorf("Triple(s, 3)[1] = 9 wrote %v", s)
	}
}

func TestPair(t *testing.T) {
	s := []uint64{1, 2, 3, 4, 5}
	for i := range uint64(4) {
		if got := *Pair(s, i); got != [2]uint64{i + 1, i + 2} {
			t.Errorf("Pair(s, %d) = %v", i, got)
		}
	}
	p := Pair(s, 2)
	p[1] = 9
	if s[3] != 9 {
		t.Errorf("Pair(s, 2)[1] = 9 wrote %v", s)
	}
}
