package chattemplate

import (
	"fmt"
	"math"
	"testing"
)

func TestDict(t *testing.T) {
	for _, n := range []int{3, dictIndexAt - 1, dictIndexAt, 40} {
		d := NewDict()
		for i := range n {
			d.Set(fmt.Sprintf("k%d", n-i), int64(i))
		}
		d.Set("k1", "again") // keeps its place
		d.Set(int64(1), "int")
		d.Set(true, "bool is 1") // Python: True == 1
		if v, _ := d.Get(1.0); v != "bool is 1" {
			t.Errorf("n=%d: d[1.0] = %v", n, v)
		}
		d.Delete(fmt.Sprintf("k%d", n))
		if d.Len() != n {
			t.Errorf("n=%d: Len %d", n, d.Len())
		}
		if k := d.Keys()[0]; n > 1 && k != fmt.Sprintf("k%d", n-1) {
			t.Errorf("n=%d: first key %v", n, k)
		}
		if v, ok := d.Get("k1"); !ok || v != "again" {
			t.Errorf("n=%d: k1 = %v", n, v)
		}
		if _, ok := d.Copy().Get(fmt.Sprintf("k%d", n)); ok {
			t.Errorf("n=%d: deleted key in copy", n)
		}
	}
}

func TestParseJSONValue(t *testing.T) {
	v, err := ParseJSONValue([]byte(` {"b": 1.0, "a": [1, -0, 1e2, 1E-5, 12345678901234, "\u00e9\ud83d\ude00\"", true, false, null], "b": 2, "c": {}} `))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := pyRepr(v)
	want := `{'b': 2, 'a': [1, 0, 100.0, 1e-05, 12345678901234, 'é😀"', True, False, None], 'c': {}}`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	for _, bad := range []string{``, `{`, `[1,]`, `{"a" 1}`, `01`, `"\x01"`, `1 2`, `99999999999999999999`, `tru`, `"\u12"`} {
		if _, err := ParseJSONValue([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestPyFloatRepr(t *testing.T) {
	for _, tt := range []struct {
		f    float64
		want string
	}{
		{1, "1.0"}, {0.1, "0.1"}, {1e-5, "1e-05"}, {1e-4, "0.0001"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"},
		{123456789.125, "123456789.125"}, {math.Copysign(0, -1), "-0.0"}, {math.Inf(1), "inf"}, {math.NaN(), "nan"}, {2.5e-7, "2.5e-07"},
		{1.7976931348623157e308, "1.7976931348623157e+308"}, {5e-324, "5e-324"}, {0.30000000000000004, "0.30000000000000004"},
	} {
		if got := pyFloatRepr(tt.f); got != tt.want {
			t.Errorf("repr(%v) = %q, want %q", tt.f, got, tt.want)
		}
	}
}
