package shard

import "fmt"

// Rand is the seeded generator behind the shuffle that dataprep writes
// (the row-to-rank order of Assign): SplitMix64 (Steele, Lea, Flood 2014).
// The Python loader's per-epoch block order is a different generator
// (numpy's PCG64, python/ferry/order.py). Rand's output is fixed by this
// definition, so the shuffle can be reproduced in any language:
//
//	state += 0x9E3779B97F4A7C15
//	z = state
//	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
//	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
//	return z ^ (z >> 31)
type Rand struct{ state uint64 }

// NewRand returns a generator whose state starts at seed.
func NewRand(seed uint64) *Rand { return &Rand{state: seed} }

// Uint64 returns the next value.
func (r *Rand) Uint64() uint64 {
	r.state += 0x9E3779B97F4A7C15
	z := r.state
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// Below returns a uniform value in [0, n) for n > 0, by rejection: values
// x < (2^64 mod n) are drawn again, then x mod n is returned.
func (r *Rand) Below(n uint64) uint64 {
	limit := -n % n // (2^64 - n) mod n == 2^64 mod n
	for {
		x := r.Uint64()
		if x >= limit { // the values left, limit..2^64-1, are a multiple of n
			return x % n
		}
	}
}

// Permutation returns a seeded uniform permutation of 0..n-1: start from the
// identity and, for i = n−1 down to 1, swap p[i] with p[Below(i+1)]
// (Fisher–Yates) using NewRand(seed).
func Permutation(n int, seed uint64) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32(i)
	}
	r := NewRand(seed)
	for i := n - 1; i > 0; i-- {
		j := r.Below(uint64(i + 1))
		p[i], p[j] = p[j], p[i]
	}
	return p
}

// Assign lays unique rows out in the global order over ranks, as the format
// defines: the rows are shuffled with Permutation(unique, seed); without
// dropLast the order wraps around to give every rank ceil(unique/ranks) rows,
// with dropLast the tail is cut to floor(unique/ranks) rows per rank.
// order[p] is the unique row at global position p, which lives in rank
// p % ranks at row p / ranks.
func Assign(unique, ranks int, seed uint64, dropLast bool) (order []int32, rowsPerRank int, err error) {
	if ranks < 1 || ranks > MaxRanks {
		return nil, 0, fmt.Errorf("%w: ranks %d, want 1..%d", ErrConfig, ranks, MaxRanks)
	}
	if unique < ranks {
		return nil, 0, fmt.Errorf("%w: %d rows for %d ranks: every rank needs at least one row", ErrTooFewRows, unique, ranks)
	}
	if unique > 1<<31-1 {
		return nil, 0, fmt.Errorf("%w: %d rows, at most %d", ErrConfig, unique, 1<<31-1)
	}
	perm := Permutation(unique, seed)
	if dropLast {
		rowsPerRank = unique / ranks
	} else {
		rowsPerRank = (unique + ranks - 1) / ranks
	}
	total := rowsPerRank * ranks
	order = make([]int32, total)
	for p := range order {
		order[p] = perm[p%unique]
	}
	return order, rowsPerRank, nil
}
