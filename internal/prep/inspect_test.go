package prep

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// TestInspect: Verify passes a run's output and names a damaged shard;
// InspectTokenizer takes the manifest's tokenizer and refuses a missing
// explicit one; DescribeRow's segments, loss counts and texts (an Alpaca
// row decoded whole, a chat row in trained and untrained spans).
func TestInspect(t *testing.T) {
	ctx := context.Background()
	out := filepath.Join(t.TempDir(), "out")
	res, err := Run(ctx, smallConfig(out))
	if err != nil {
		t.Fatal(err)
	}
	m := res.Manifest
	if err := Verify(out, m); err != nil {
		t.Fatal(err)
	}
	tok, err := InspectTokenizer(m, "", nil)
	if err != nil || tok == nil {
		t.Fatalf("the manifest's tokenizer: %v, %v", tok, err)
	}
	if _, err := InspectTokenizer(m, filepath.Join(t.TempDir(), "none"), nil); err == nil {
		t.Error("a missing --tokenizer accepted")
	}
	_, rd, err := shard.OpenDir(out, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var r shard.Row
	if err := rd.Row(0, &r); err != nil {
		t.Fatal(err)
	}
	segs := DescribeRow(&r, m, tok)
	if len(segs) != len(r.Segments) || len(segs) == 0 {
		t.Fatalf("%d segments, the row has %d", len(segs), len(r.Segments))
	}
	for i, s := range segs {
		loss := 0
		for _, l := range r.Labels[s.Start : s.Start+s.Length] {
			if l != shard.IgnoreIndex {
				loss++
			}
		}
		if s.Segment != r.Segments[i] || len(s.IDs) != int(s.Length) || s.Loss != loss || s.Chat ||
			s.Text != tok.Decode(s.IDs, false) || !strings.Contains(s.Text, "### Response:") {
			t.Errorf("segment %d: %+v", i, s)
		}
	}
	if segs := DescribeRow(&r, m, nil); segs[0].Text != "" || segs[0].Loss == 0 {
		t.Errorf("without a tokenizer: %+v", segs[0])
	}

	// a damaged shard is named
	f := filepath.Join(out, m.Files[2].Path)
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 1
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Verify(out, m); err == nil || !strings.Contains(err.Error(), m.Files[2].Path) {
		t.Errorf("damaged shard: %v", err)
	}

	// chat: the trained spans are the assistant's replies
	c := chatConfig(t, twoTurns)
	cres, err := Run(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	qwen, err := tokenize.Load(qwenDir)
	if err != nil {
		t.Fatal(err)
	}
	_, crd, err := shard.OpenDir(c.Out, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer crd.Close()
	if err := crd.Row(0, &r); err != nil {
		t.Fatal(err)
	}
	segs = DescribeRow(&r, cres.Manifest, qwen)
	var trained []string
	var all strings.Builder
	for _, sp := range segs[0].Spans {
		all.WriteString(sp.Text)
		if sp.Trained {
			trained = append(trained, sp.Text)
		}
	}
	if len(segs) != 1 || !segs[0].Chat || strings.Join(trained, "|") != "Hello!<|im_end|>|See you.  <|im_end|>" ||
		!strings.HasPrefix(all.String(), "<|im_start|>system\nBe brief.") {
		t.Errorf("chat segments %+v", segs)
	}
}
