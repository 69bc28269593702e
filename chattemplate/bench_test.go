package chattemplate

import (
	"testing"
	"time"
)

// BenchmarkApply renders the golden corpus (194 conversations) with a
// family's template; conversations/s = 194 / (ns/op) * 1e9.
func BenchmarkApply(b *testing.B) {
	corpus := loadCorpus(b)
	for _, fam := range []string{"family/qwen2.5", "family/llama3.1", "family/gpt-oss", "trl/qwen2_5_training"} {
		lt := loadTemplate(fam)
		if lt.err != nil {
			b.Fatal(lt.err)
		}
		opts := &Options{Now: func() time.Time { return pinnedNow }}
		b.Run("template="+fam, func(b *testing.B) {
			b.ReportAllocs()
			var bytes int64
			for b.Loop() {
				bytes = 0
				for _, c := range corpus {
					res, _ := lt.t.Apply(c.Chat, lt.special, opts)
					bytes += int64(len(res.Text))
				}
			}
			b.SetBytes(bytes)
			b.ReportMetric(float64(len(corpus))*float64(b.N)/b.Elapsed().Seconds(), "conv/s")
		})
	}
}

func BenchmarkParse(b *testing.B) {
	lt := loadTemplate("family/gpt-oss")
	src := lt.t.name
	_ = src
	for b.Loop() {
		if _, _, err := FromTokenizerDir(testdataDir+"/families/gpt-oss", ""); err != nil {
			b.Fatal(err)
		}
	}
}
