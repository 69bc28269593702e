package harness_test

import (
	"fmt"

	"github.com/ferryml/ferry/bench/internal/harness"
)

// A side prints its own figures as the last line of its stdout; the
// harness reads them next to the wall time and peak RSS it measures.
func ExampleParseBenchLine() {
	out := []byte(`{"ids": [1, 2, 3]}
{"bench": {"encode_mb_per_s": 41.5, "results": {"ferry_loader": {"cpu_us_per_batch": 7.3}}, "torch": "2.4"}}
`)
	m, err := harness.ParseBenchLine(out)
	fmt.Println(m["encode_mb_per_s"], m["results.ferry_loader.cpu_us_per_batch"], len(m), err)
	// Output: 41.5 7.3 2 <nil>
}

// Ratios are taken pair by pair and read as ferry's advantage.
func ExamplePairRatios() {
	ferry := []float64{0.51, 0.48, 0.55} // seconds
	anchor := []float64{5.3, 4.6, 6.1}   // seconds, run right after each ferry run
	r, _ := harness.PairRatios(ferry, anchor, false)
	s, _ := harness.Summarize(r)
	fmt.Println(harness.FormatRatio(s))
	// Output: 10.4× [9.58–11.1]
}
