package shard

import "fmt"

// Example is one tokenized source record, or one piece of a record split
// with --split-long. Tokens already include the tokenizer's special tokens
// and are at most seq_len long.
type Example struct {
	Sample int64   // 0-based record index in the input (a mixture: in its source)
	Source int32   // a mixture's source index in the recipe; 0 otherwise
	Tokens []int32 // token ids
	Prompt int     // leading prompt tokens (no loss under LabelsMaskPrompt)
	// Loss, when not nil, has one entry per token: false gives the token
	// the label −100 (a chat example's tokens outside the trained turns).
	// It applies under every labels policy; nil trains every token.
	Loss []bool
}

// Layout turns examples into rows. The zero value is not usable; set every field.
//
// It is the one form of --seq-len, --mode and --labels from the flag to the
// writer: DirConfig and PartOptions carry it (a part manifest stores its
// first three fields; the pad id is the tokenizer's, stored with it).
type Layout struct {
	SeqLen int    `json:"seq_len"`
	Mode   Mode   `json:"mode"`
	Labels Labels `json:"labels"`
	PadID  int32  `json:"-"`
}

// NewRow returns a Row with buffers sized for l, to be reused with Fill.
func (l Layout) NewRow() *Row {
	r := &Row{
		InputIDs: make([]int32, l.SeqLen),
		Labels:   make([]int32, l.SeqLen),
	}
	if l.Mode == ModePack {
		r.PositionIDs = make([]int32, l.SeqLen)
	}
	return r
}

// Fill lays the examples out in row, which must come from NewRow (its
// buffers are overwritten; Segments is reused). In pad mode exs must hold
// exactly one example.
//
// Labels: input ids, then −100 on padding positions (mask-pad, mask-prompt)
// or the pad id (copy); −100 on each example's first Prompt tokens
// (mask-prompt); −100 where an example's Loss is false (the chat policies
// assistant, last-assistant, generation and all). In pack mode the first label of every example is −100 under
// every policy, as HF's DataCollatorWithFlattening does, so that no example
// learns to predict the next one's first token. position_ids count 0,1,2…
// from each example's start; padding continues counting from the last example.
func (l Layout) Fill(row *Row, exs []Example) error {
	L := l.SeqLen
	if len(row.InputIDs) != L || len(row.Labels) != L || (l.Mode == ModePack && len(row.PositionIDs) != L) {
		return fmt.Errorf("%w: row buffers do not match seq_len %d", ErrConfig, L)
	}
	if l.Mode == ModePad && len(exs) != 1 {
		return fmt.Errorf("%w: pad mode row with %d examples", ErrConfig, len(exs))
	}
	row.Segments = row.Segments[:0]
	pos := 0
	for _, ex := range exs {
		n := len(ex.Tokens)
		if n == 0 {
			return fmt.Errorf("%w: sample %d: empty example", ErrConfig, ex.Sample)
		}
		if n > L-pos {
			return fmt.Errorf("%w: sample %d: %d tokens do not fit at position %d of %d", ErrConfig, ex.Sample, n, pos, L)
		}
		copy(row.InputIDs[pos:pos+n], ex.Tokens)
		lab := row.Labels[pos : pos+n]
		copy(lab, ex.Tokens)
		if ex.Loss != nil {
			if len(ex.Loss) != n {
				return fmt.Errorf("%w: sample %d: %d loss flags for %d tokens", ErrConfig, ex.Sample, len(ex.Loss), n)
			}
			for j, keep := range ex.Loss {
				if !keep {
					lab[j] = IgnoreIndex
				}
			}
		}
		if l.Labels == LabelsMaskPrompt {
			p := min(max(ex.Prompt, 0), n)
			for j := range p {
				lab[j] = IgnoreIndex
			}
		}
		if l.Mode == ModePack {
			lab[0] = IgnoreIndex
			pids := row.PositionIDs[pos : pos+n]
			for j := range pids {
				pids[j] = int32(j)
			}
		}
		row.Segments = append(row.Segments, Segment{Sample: ex.Sample, Start: int32(pos), Length: int32(n), Source: ex.Source})
		pos += n
	}
	row.Length = int32(pos)
	padLabel := int32(IgnoreIndex)
	if l.Labels == LabelsCopy {
		padLabel = l.PadID
	}
	for j := pos; j < L; j++ {
		row.InputIDs[j] = l.PadID
		row.Labels[j] = padLabel
	}
	if l.Mode == ModePack {
		next := int32(0)
		if len(exs) > 0 {
			next = int32(len(exs[len(exs)-1].Tokens))
		}
		for j := pos; j < L; j++ {
			row.PositionIDs[j] = next
			next++
		}
	}
	return nil
}
