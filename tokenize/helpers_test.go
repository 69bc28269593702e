package tokenize

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/ferryml/ferry/internal/invariants"
	"github.com/ferryml/ferry/internal/testutil/tokgolden"
)

// fixtures is the repository's tokenizer fixture directory.
var fixtures = filepath.Join("..", "testdata", "tokenizers")

var models = []string{"qwen2.5", "llama3.1"}

// families are all the tokenizer fixtures with corpus-dev goldens: models,
// the SentencePiece-style ones and the byte-level ones with other patterns.
var families = append(append([]string{}, models...),
	"tinyllama", "llama2", "mistral-v0.3", "phi3",
	"deepseek-r1", "phi4", "olmo2", "smollm2", "mistral-nemo", "gpt-oss")

var loaded sync.Map // model -> *Tokenizer

func loadModel(t testing.TB, model string) *Tokenizer {
	t.Helper()
	if v, ok := loaded.Load(model); ok {
		return v.(*Tokenizer)
	}
	tok, err := Load(filepath.Join(fixtures, model))
	if err == nil && !tok.compiled {
		// The first Load parsed and wrote the compiled cache (TestMain
		// points it at a temporary directory): the tests use what a second
		// Load reads from it, and TestCompiledSame holds it to the parse.
		tok, err = Load(filepath.Join(fixtures, model))
		if err == nil && !tok.compiled {
			t.Fatalf("%s: the second Load did not read the compiled cache", model)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	v, _ := loaded.LoadOrStore(model, tok)
	return v.(*Tokenizer)
}

func openMaybeCompressed(t testing.TB, path string) io.Reader {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	switch filepath.Ext(path) {
	case ".zst":
		d, err := zstd.NewReader(f, zstd.WithDecoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(d.Close)
		return d
	case ".gz":
		g, err := gzip.NewReader(f)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	return f
}

// readJSONL decodes one JSON value per line into a new T each.
func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	sc := bufio.NewScanner(openMaybeCompressed(t, path))
	sc.Buffer(nil, 64<<20)
	var out []T
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%s: line %d: %v", path, len(out)+1, err)
		}
		out = append(out, v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var corpus struct {
	once  sync.Once
	texts []string
}

// corpusStep is the stride of the corpus lines heavy tests sample: every
// line normally, fewer under the race detector.
func corpusStep(normal, race int) int {
	if invariants.Race {
		return race
	}
	return normal
}

func corpusTexts(t testing.TB) []string {
	t.Helper()
	corpus.once.Do(func() {
		for _, r := range readJSONL[struct {
			Text string `json:"text"`
		}](t, filepath.Join(fixtures, "corpus-dev.jsonl.zst")) {
			corpus.texts = append(corpus.texts, r.Text)
		}
	})
	if len(corpus.texts) == 0 {
		t.Fatal("corpus-dev.jsonl.zst is empty")
	}
	return corpus.texts
}

func goldenIDs(t testing.TB, model string, special bool) [][]int32 {
	t.Helper()
	ids, err := tokgolden.IDs(fixtures, model, special)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}
