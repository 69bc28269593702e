package harness

import (
	"errors"
	"fmt"
	"math"
	"sort"
)

// ErrNoSamples is returned when a summary or ratio is asked of no values.
var ErrNoSamples = errors.New("harness: no samples")

// ErrBadSample marks a value that cannot enter a statistic: NaN, an
// infinity, or a non-positive value where a ratio needs a positive one.
var ErrBadSample = errors.New("harness: bad sample")

// Summary is the median and range of a set of values.
type Summary struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	N      int     `json:"n"`
}

// Summarize returns the median, minimum and maximum of xs. The median of an
// even count is the mean of the two middle values. xs is not modified.
func Summarize(xs []float64) (Summary, error) {
	if len(xs) == 0 {
		return Summary{}, ErrNoSamples
	}
	s := make([]float64, len(xs))
	copy(s, xs)
	for i, x := range s {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return Summary{}, fmt.Errorf("%w: value %d is %v", ErrBadSample, i, x)
		}
	}
	sort.Float64s(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = s[n/2-1] + (s[n/2]-s[n/2-1])/2
	}
	return Summary{Median: med, Min: s[0], Max: s[n-1], N: n}, nil
}

// PairRatios returns, for each pair i, ferry's speed-up over the anchor:
// anchor[i]/ferry[i] when lower values are better (times), ferry[i]/anchor[i]
// when higher values are better (throughputs). Both slices must have the
// same length and hold positive finite values.
func PairRatios(ferry, anchor []float64, higherIsBetter bool) ([]float64, error) {
	if len(ferry) != len(anchor) {
		return nil, fmt.Errorf("harness: %d ferry samples but %d anchor samples", len(ferry), len(anchor))
	}
	if len(ferry) == 0 {
		return nil, ErrNoSamples
	}
	out := make([]float64, len(ferry))
	for i := range ferry {
		f, a := ferry[i], anchor[i]
		for _, v := range [2]float64{f, a} {
			if !(v > 0) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%w: pair %d has value %v, want a positive finite number", ErrBadSample, i, v)
			}
		}
		if higherIsBetter {
			out[i] = f / a
		} else {
			out[i] = a / f
		}
	}
	return out, nil
}
