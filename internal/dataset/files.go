package dataset

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ferryml/ferry/internal/storage"
)

// ErrNoMatch marks an input pattern that names no file.
var ErrNoMatch = errors.New("dataset: no input file matches")

// hasMeta reports whether s holds a glob metacharacter (* ? [ or \).
func hasMeta(s string) bool { return strings.ContainsAny(s, `*?[\`) }

// Expand turns input patterns into the files they name, in the order
// given: a pattern without glob metacharacters names itself; one with them
// (path.Match syntax: *, ?, [...], matched per path element) names every
// matching file in lexical order, local or under an s3:// prefix. A pattern
// that matches nothing, a bad pattern and a file named twice are errors:
// a split spread over several files is read whole or not at all, and no
// record is read twice.
func Expand(ctx context.Context, patterns []string) ([]string, error) {
	var out []string
	seen := map[string]string{}
	for _, p := range patterns {
		var files []string
		switch {
		case !hasMeta(p):
			files = []string{p}
		default:
			m, err := storage.Glob(ctx, p)
			if err != nil {
				return nil, fmt.Errorf("--input %q: %w", p, err)
			}
			files = m
		}
		if len(files) == 0 {
			return nil, fmt.Errorf("%w: --input %q", ErrNoMatch, p)
		}
		slices.Sort(files)
		for _, f := range files {
			if q, dup := seen[f]; dup {
				return nil, fmt.Errorf("--input %q: %s is already named by --input %q: no record is read twice", p, f, q)
			}
			seen[f] = p
			out = append(out, f)
		}
	}
	return out, nil
}

// ReadFiles reads every record of the files in locs, in that order, as one
// input (see Read for the formats; the files may differ in format and
// compression). Samples number the records across the files: the records
// of the second file follow the first file's (skipped ones included), so a
// sample index names the same record whatever the worker count. Format is
// the files' format, or the formats joined with "+" when they differ;
// Bytes and RawBytes are totals. Errors name the file.
func ReadFiles(ctx context.Context, locs []string, opt Options) (*Result, error) {
	if len(locs) == 1 {
		return Read(ctx, locs[0], opt)
	}
	if len(locs) == 0 {
		return nil, fmt.Errorf("%w: no input files", ErrEmpty)
	}
	all := &Result{}
	var formats []string
	var base int64
	for _, loc := range locs {
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		res, err := Read(ctx, loc, opt)
		if err != nil {
			return nil, err
		}
		all.Records = append(all.Records, res.Records...)
		for _, s := range res.Samples {
			all.Samples = append(all.Samples, base+s)
		}
		base += int64(len(res.Records)) + res.Skipped
		all.Skipped += res.Skipped
		all.Bytes += res.Bytes
		all.RawBytes += res.RawBytes
		if !slices.Contains(formats, string(res.Format)) {
			formats = append(formats, string(res.Format))
		}
	}
	all.Format = Format(strings.Join(formats, "+"))
	return all, nil
}

// Head keeps the input's first n records (by record index, so skipped
// records count): what datasets' split="train[:n]" selects. n = 0 keeps
// all. An input with fewer than n records is an error naming it.
func (r *Results[R]) Head(n int64, name string) error {
	if n <= 0 {
		return nil
	}
	if total := int64(len(r.Records)) + r.Skipped; total < n {
		return fmt.Errorf("%w: --max-records %d: %s has only %d records", ErrLimit, n, name, total)
	}
	keep := 0
	for keep < len(r.Samples) && r.Samples[keep] < n {
		keep++
	}
	r.Skipped = n - int64(keep)
	r.Records, r.Samples = r.Records[:keep], r.Samples[:keep]
	return nil
}
