package procstat

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{5}, 5},
		{[]float64{3, 1, 2}, 2},
		{[]float64{3, 1, 2, 10}, 2}, // the lower middle
		{[]float64{0.5, 0.25}, 0.25},
	} {
		in := slices.Clone(tc.in)
		if got := Median(in); got != tc.want {
			t.Errorf("Median(%v) = %v, want %v", tc.in, got, tc.want)
		}
		if !slices.Equal(in, tc.in) {
			t.Errorf("Median reordered its argument: %v, was %v", in, tc.in)
		}
	}
}

func TestCPUSecondsAdvances(t *testing.T) {
	c0 := CPUSeconds()
	if c0 <= 0 {
		t.Fatalf("CPUSeconds() = %v at start, want > 0 (the test binary has run)", c0)
	}
	x := uint64(1)
	for deadline := time.Now().Add(30 * time.Second); CPUSeconds()-c0 < 0.02; {
		if time.Now().After(deadline) {
			t.Fatalf("CPUSeconds() stayed at %v over 30 s of busy work", CPUSeconds())
		}
		for i := 0; i < 100000; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	if x == 0 {
		t.Log(x) // keeps the busy loop from being optimized away
	}
}

func TestParseVmHWM(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"Name:\tx\nVmPeak:\t  10 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1 kB\n", 2048 << 10},
		{"VmHWM:\t12 MB\n", 0},
		{"Name:\tx\n", 0},
		{"", 0},
	} {
		if got := parseVmHWM(c.in); got != c.want {
			t.Errorf("parseVmHWM(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	if runtime.GOOS == "linux" && PeakRSS() <= 0 {
		t.Error("PeakRSS() <= 0 on Linux")
	}
}
