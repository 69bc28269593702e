package bytestr

import "testing"

func TestString(t *testing.T) {
	for _, s := range []string{"", "a", "▁hello▁world"} {
		if got := String([]byte(s)); got != s {
			t.Errorf("String(%q) = %q", s, got)
		}
	}
}
