package shard

import (
	"fmt"
	"math/bits"
	"slices"
)

// Pack assigns items of the given lengths (each 1..seqLen) to rows of
// seqLen tokens by best-fit decreasing: items are taken longest first (ties
// by index), and each goes into the open row with the least room that still
// fits it (ties: the row that reached that room last), or into a new row.
// The result is deterministic. It returns the item indices row by row:
// row k holds items[rowStart[k]:rowStart[k+1]], in the order they were placed.
func Pack(lengths []int32, seqLen int) (items []int32, rowStart []int32, err error) {
	n := len(lengths)
	if seqLen < 1 || seqLen > MaxSeqLen {
		return nil, nil, fmt.Errorf("%w: seq_len %d", ErrConfig, seqLen)
	}
	idx := make([]int32, n)
	for i, l := range lengths {
		if l < 1 || int(l) > seqLen {
			return nil, nil, fmt.Errorf("%w: item %d has length %d, want 1..%d", ErrConfig, i, l, seqLen)
		}
		idx[i] = int32(i)
	}
	slices.SortStableFunc(idx, func(a, b int32) int { return int(lengths[b]) - int(lengths[a]) })

	// Open rows by remaining room: stacks[c] holds rows with exactly c free
	// tokens, and bit c of nonEmpty is set when stacks[c] is not empty.
	stacks := make([][]int32, seqLen+1)
	nonEmpty := make([]uint64, (seqLen+1+63)/64)
	var (
		head, tail []int32 // per row: first and last item
		next       = make([]int32, n)
		count      []int32
	)
	findRoom := func(s int) int {
		w := s / 64
		word := nonEmpty[w] &^ (1<<(uint(s)%64) - 1)
		for {
			if word != 0 {
				return w*64 + bits.TrailingZeros64(word)
			}
			w++
			if w == len(nonEmpty) {
				return -1
			}
			word = nonEmpty[w]
		}
	}
	push := func(c int, row int32) {
		stacks[c] = append(stacks[c], row)
		nonEmpty[c/64] |= 1 << (uint(c) % 64)
	}
	for _, it := range idx {
		s := int(lengths[it])
		next[it] = -1
		c := findRoom(s)
		var row int32
		if c < 0 {
			row = int32(len(head))
			head = append(head, it)
			tail = append(tail, it)
			count = append(count, 1)
			c = seqLen
		} else {
			st := stacks[c]
			row = st[len(st)-1]
			stacks[c] = st[:len(st)-1]
			if len(stacks[c]) == 0 {
				nonEmpty[c/64] &^= 1 << (uint(c) % 64)
			}
			next[tail[row]] = it
			tail[row] = it
			count[row]++
		}
		if left := c - s; left > 0 {
			push(left, row)
		}
	}
	items = make([]int32, 0, n)
	rowStart = make([]int32, 0, len(head)+1)
	for r := range head {
		rowStart = append(rowStart, int32(len(items)))
		for it := head[r]; it >= 0; it = next[it] {
			items = append(items, it)
		}
	}
	rowStart = append(rowStart, int32(len(items)))
	return items, rowStart, nil
}
