package tokenize

import (
	"path/filepath"
	"testing"
)

// BenchmarkLoad times Load with the compiled cache off (parse=) and read
// from it (compiled=).
func BenchmarkLoad(b *testing.B) {
	for _, m := range models {
		b.Run("parse="+m, func(b *testing.B) {
			b.Setenv("FERRY_TOKENIZER_CACHE", "off")
			cpu0 := cpuSeconds()
			for b.Loop() {
				if _, err := Load(filepath.Join(fixtures, m)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric((cpuSeconds()-cpu0)*1e3/float64(b.N), "cpu-ms/op")
		})
		b.Run("compiled="+m, func(b *testing.B) {
			b.Setenv("FERRY_TOKENIZER_CACHE", b.TempDir())
			if _, err := Load(filepath.Join(fixtures, m)); err != nil { // writes the cache
				b.Fatal(err)
			}
			cpu0 := cpuSeconds()
			for b.Loop() {
				tok, err := Load(filepath.Join(fixtures, m))
				if err != nil || !tok.compiled {
					b.Fatal("not compiled", err)
				}
			}
			// Wall-clock time suffers on a shared machine; CPU time does less.
			b.ReportMetric((cpuSeconds()-cpu0)*1e3/float64(b.N), "cpu-ms/op")
		})
	}
}
