package tokenize

import (
	"path/filepath"
	"testing"
)

func BenchmarkLoad(b *testing.B) {
	for _, m := range models {
		b.Run(m, func(b *testing.B) {
			for b.Loop() {
				if _, err := Load(filepath.Join(fixtures, m)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
