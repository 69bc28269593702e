package shard

import "fmt"

// RowSource supplies the unique rows of a shard directory. FillRow may be
// called concurrently, each call with its own dst (from Layout.NewRow).
type RowSource interface {
	NumRows() int
	FillRow(i int, dst *Row) error
}

// ExampleSource makes rows from tokenized examples with a Layout: one row
// per example in pad mode, rows packed by Pack in pack mode.
type ExampleSource struct {
	layout   Layout
	exs      []Example // in row order
	rowStart []int32   // row k holds exs[rowStart[k]:rowStart[k+1]]
}

// NewExampleSource validates the examples (1..seq_len tokens each) and lays
// them out in rows. exs is not copied; it must not change while in use.
func NewExampleSource(l Layout, exs []Example) (*ExampleSource, error) {
	if l.SeqLen < 1 || l.SeqLen > MaxSeqLen {
		return nil, fmt.Errorf("%w: seq_len %d", ErrConfig, l.SeqLen)
	}
	s := &ExampleSource{layout: l}
	lengths := make([]int32, len(exs))
	for i, e := range exs {
		if len(e.Tokens) < 1 || len(e.Tokens) > l.SeqLen {
			return nil, fmt.Errorf("%w: example %d (sample %d) has %d tokens, want 1..%d", ErrConfig, i, e.Sample, len(e.Tokens), l.SeqLen)
		}
		lengths[i] = int32(len(e.Tokens))
	}
	switch l.Mode {
	case ModePad:
		s.exs = exs
		s.rowStart = make([]int32, len(exs)+1)
		for i := range s.rowStart {
			s.rowStart[i] = int32(i)
		}
	case ModePack:
		items, rowStart, err := Pack(lengths, l.SeqLen)
		if err != nil {
			return nil, err
		}
		s.exs = make([]Example, len(items))
		for k, it := range items {
			s.exs[k] = exs[it]
		}
		s.rowStart = rowStart
	default:
		return nil, fmt.Errorf("%w: mode %q", ErrConfig, l.Mode)
	}
	return s, nil
}

// NumRows returns the number of unique rows.
func (s *ExampleSource) NumRows() int { return len(s.rowStart) - 1 }

// Examples returns the examples of row i.
func (s *ExampleSource) Examples(i int) []Example { return s.exs[s.rowStart[i]:s.rowStart[i+1]] }

// FillRow lays out row i in dst.
func (s *ExampleSource) FillRow(i int, dst *Row) error {
	return s.layout.Fill(dst, s.Examples(i))
}

// RowSlice is a RowSource over rows held in memory.
type RowSlice []Row

// NumRows returns len(s).
func (s RowSlice) NumRows() int { return len(s) }

// FillRow copies row i into dst.
func (s RowSlice) FillRow(i int, dst *Row) error {
	r := &s[i]
	copy(dst.InputIDs, r.InputIDs)
	copy(dst.Labels, r.Labels)
	if dst.PositionIDs != nil {
		if len(r.PositionIDs) != len(dst.PositionIDs) {
			return fmt.Errorf("%w: row %d has %d position_ids, want %d", ErrConfig, i, len(r.PositionIDs), len(dst.PositionIDs))
		}
		copy(dst.PositionIDs, r.PositionIDs)
	}
	if len(r.InputIDs) != len(dst.InputIDs) || len(r.Labels) != len(dst.Labels) {
		return fmt.Errorf("%w: row %d has %d/%d ids/labels, want %d", ErrConfig, i, len(r.InputIDs), len(r.Labels), len(dst.InputIDs))
	}
	dst.Length = r.Length
	dst.Segments = append(dst.Segments[:0], r.Segments...)
	return nil
}
