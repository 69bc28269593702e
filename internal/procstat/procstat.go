package procstat

import "slices"

// Median is the middle value of xs, the lower of the two middle values
// when len(xs) is even; xs is not modified. It panics on an empty xs.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
