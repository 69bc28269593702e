package prep

import (
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// What `dataprep inspect` reads from a shard directory; the command prints
// it.

// Verify checks every shard of the local directory dir against its
// manifest m: size, structure and SHA-256.
func Verify(dir string, m *shard.Manifest) error {
	for r := range m.Ranks {
		_, rd, err := shard.OpenDir(dir, r, shard.WithChecksum())
		if err != nil {
			return err
		}
		rd.Close()
	}
	return nil
}

// InspectTokenizer is the tokenizer to decode a shard directory's rows
// with: the one at path when path is given (its load error is returned),
// else the manifest's tokenizer.path when it loads and its SHA-256 is the
// manifest's; nil without error when there is none. load is tokenize.Load
// when nil.
func InspectTokenizer(m *shard.Manifest, path string, load func(string) (*tokenize.Tokenizer, error)) (*tokenize.Tokenizer, error) {
	if load == nil {
		load = tokenize.Load
	}
	p := path
	if p == "" {
		p = m.Tokenizer.Path
	}
	if p == "" {
		return nil, nil
	}
	t, err := load(p)
	switch {
	case err == nil && (path != "" || t.SHA256() == m.Tokenizer.SHA256):
		return t, nil
	case path != "":
		return nil, err
	}
	return nil, nil
}

// SegmentView is one segment of a row (the tokens of one source example)
// as dataprep inspect shows it.
type SegmentView struct {
	shard.Segment
	IDs       []int32 // the segment's input ids
	Loss      int     // how many of them carry loss (label != -100)
	Truncated bool    // the segment fills the row (seq_len tokens)
	// Chat is set for chat labels (the manifest's labels policy): the
	// decoded text is then in Spans, runs of trained and untrained tokens.
	Chat  bool
	Spans []Span
	// Text is the decoded segment of a non-chat row.
	Text string
}

// Span is a run of a chat segment's tokens, decoded.
type Span struct {
	Text    string
	Trained bool // the tokens carry loss
}

// DescribeRow describes the segments of row r of a directory with manifest
// m, decoding their tokens with tok (nil: no Text and no Spans).
func DescribeRow(r *shard.Row, m *shard.Manifest, tok *tokenize.Tokenizer) []SegmentView {
	var out []SegmentView
	for _, s := range r.Segments {
		ids := r.InputIDs[s.Start : s.Start+s.Length]
		lab := r.Labels[s.Start : s.Start+s.Length]
		v := SegmentView{Segment: s, IDs: ids, Truncated: s.Length == int32(m.SeqLen)}
		for _, l := range lab {
			if l != shard.IgnoreIndex {
				v.Loss++
			}
		}
		switch {
		case tok != nil && m.Labels.IsChat():
			v.Chat = true
			for j := 0; j < len(ids); {
				trained := lab[j] != shard.IgnoreIndex
				k := j
				for k < len(ids) && (lab[k] != shard.IgnoreIndex) == trained {
					k++
				}
				v.Spans = append(v.Spans, Span{Text: tok.Decode(ids[j:k], false), Trained: trained})
				j = k
			}
		case tok != nil:
			v.Text = tok.Decode(ids, false)
		}
		out = append(out, v)
	}
	return out
}
