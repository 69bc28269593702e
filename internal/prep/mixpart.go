package prep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
)

// A split run of a recipe (docs/mixtures.md, docs/parts.md) is a split run
// of every source, each into its own directory of the parts location:
//
//	PARTS/source-000/part-IIIII-of-NNNNN.{bin,json}   source 0's part I
//	PARTS/source-001/...
//	PARTS/mixture-IIIII-of-NNNNN.json                  part I of the recipe, written last
//
// Part I reads part I's share of every source. Commit checks and assembles
// each source as a split run of one input, then decides and writes the
// mixture with the same function as Run (writeMix): the same bytes.

// mixPartFormat names a mixture part's descriptor.
const mixPartFormat = "ferry-mixture-part"

// mixPart is PARTS/mixture-IIIII-of-NNNNN.json: the recipe (path and text,
// as the part read it) and how many sources it has.
type mixPart struct {
	Format  string `json:"format"`
	Part    int    `json:"part"`
	Parts   int    `json:"parts"`
	Recipe  string `json:"recipe"`
	Text    string `json:"text"`
	Sources int    `json:"sources"`
}

func mixPartName(i, n int) string { return fmt.Sprintf("mixture-%05d-of-%05d.json", i, n) }

// sourceDir is source i's directory in a mixture's parts location.
func sourceDir(i int) string { return fmt.Sprintf("source-%03d", i) }

// runMixPart is RunPart for c.Recipe: the part's share of every source,
// then its descriptor.
func runMixPart(ctx context.Context, c Config, p Part) (*PartResult, error) {
	r, err := ReadRecipe(c.Recipe)
	if err != nil {
		return nil, err
	}
	if p.Loc == "" {
		p.Loc = storage.Join(c.Out, "parts")
	}
	name := mixPartName(p.I, p.N)
	if err := storage.Remove(ctx, storage.Join(p.Loc, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	c.LoadTokenizer = loadOnce(c.withDefaults().LoadTokenizer)
	var last *PartResult
	for i := range r.Sources {
		s := &r.Sources[i]
		sc, _, err := resolveSource(ctx, &c, s)
		if err != nil {
			return nil, r.sourceErr(s, err)
		}
		sp := p
		sp.Loc = storage.Join(p.Loc, sourceDir(i))
		if last, err = RunPart(ctx, sc, sp); err != nil {
			return nil, r.sourceErr(s, err)
		}
	}
	b, err := json.MarshalIndent(mixPart{Format: mixPartFormat, Part: p.I, Parts: p.N, Recipe: r.Path, Text: r.Text, Sources: len(r.Sources)}, "", "  ")
	if err != nil {
		return nil, err
	}
	loc := storage.Join(p.Loc, name)
	if err := storage.WriteFile(ctx, loc, append(b, '\n')); err != nil {
		return nil, fmt.Errorf("part %d/%d: %s: %w", p.I, p.N, name, err)
	}
	return &PartResult{Manifest: last.Manifest, PartsLoc: p.Loc, Loc: loc}, nil
}

// findMixParts returns the descriptor of the mixture whose parts are in
// loc, having checked that every part 0..N-1 of one recipe is there; nil
// when loc holds no mixture's parts.
func findMixParts(ctx context.Context, loc string) (*mixPart, error) {
	names, err := storage.ListNames(ctx, loc)
	if err != nil {
		return nil, nil // no parts location: Commit's own checks say so
	}
	n, found := -1, map[int]bool{}
	for _, base := range names {
		var i, k int
		if c, err := fmt.Sscanf(base, "mixture-%05d-of-%05d.json", &i, &k); err != nil || c != 2 || base != mixPartName(i, k) {
			continue
		}
		if n >= 0 && k != n {
			return nil, fmt.Errorf("%s: parts of mixtures split %d and %d ways: clear the parts of the other run", loc, n, k)
		}
		n, found[i] = k, true
	}
	if n < 0 {
		return nil, nil
	}
	var missing []string
	first := -1
	for i := range n {
		if !found[i] {
			missing = append(missing, strconv.Itoa(i))
			if first < 0 {
				first = i
			}
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s: part %s of %d of a mixture missing: no %s (the part has not finished: run dataprep --recipe ... --part %d/%d again)",
			loc, strings.Join(missing, ", "), n, mixPartName(first, n), first, n)
	}
	var d0 *mixPart
	for i := range n {
		name := storage.Join(loc, mixPartName(i, n))
		d, err := readMixPart(ctx, name)
		if err != nil {
			return nil, err
		}
		switch {
		case d.Format != mixPartFormat || d.Part != i || d.Parts != n || d.Sources < 1:
			return nil, fmt.Errorf("%s: %w: format %q part %d/%d with %d sources", name, shard.ErrCorrupt, d.Format, d.Part, d.Parts, d.Sources)
		case d0 == nil:
			d0 = d
		case d.Recipe != d0.Recipe || d.Text != d0.Text:
			return nil, fmt.Errorf("%s: recipe %s differs from part 0's %s: run every part with the same recipe", name, d.Recipe, d0.Recipe)
		}
	}
	return d0, nil
}

func readMixPart(ctx context.Context, loc string) (*mixPart, error) {
	rc, _, err := storage.OpenStream(ctx, loc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, shard.MaxManifestBytes))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", loc, err)
	}
	var d mixPart
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w: %v", loc, shard.ErrCorrupt, err)
	}
	return &d, nil
}

// commitMix is Commit for the parts of a mixture: every source's parts
// checked and assembled as a split run of one input, then writeMix.
func commitMix(ctx context.Context, c CommitConfig, cc Config, d *mixPart, t0 time.Time) (*Result, error) {
	r, err := ParseRecipe(d.Recipe, []byte(d.Text))
	if err != nil {
		return nil, err
	}
	if len(r.Sources) != d.Sources {
		return nil, fmt.Errorf("%s: %w: %d sources, its recipe has %d", c.Parts, shard.ErrCorrupt, d.Sources, len(r.Sources))
	}
	srcs := make([]*mixSource, len(r.Sources))
	var opts []shard.PartOptions
	var maxSeconds float64
	var rawBytes, bytes int64
	var by string
	for i := range r.Sources {
		s := &r.Sources[i]
		ps, err := openParts(ctx, storage.Join(c.Parts, sourceDir(i)), cc.Workers, cc.Progress)
		if err != nil {
			return nil, r.sourceErr(s, err)
		}
		defer ps.close()
		in, err := ps.assemble()
		if err != nil {
			return nil, r.sourceErr(s, err)
		}
		o := ps.ms[0].Options
		ms := &mixSource{spec: s, format: FormatAlpaca, labels: o.Labels, input: in.input, template: o.Template,
			chat: o.Chat, tok: in.tok, exs: in.exs, stats: in.stats, bytes: ps.bytes}
		if o.Chat != nil {
			ms.format = FormatChat
		}
		if len(ms.exs) == 0 {
			return nil, r.sourceErr(s, fmt.Errorf("%s: no records to use", ms.input))
		}
		// Every source's parts were made with the same flags but the
		// source's own format, template, labels and max_records.
		o.Labels, o.Template, o.TemplateText, o.Chat, o.MaxRecords = "", "", "", nil, 0
		if i > 0 && !sameJSON(o, opts[0]) {
			return nil, fmt.Errorf("%s: source %q: its parts' options differ from source %q's: every part needs the same flags",
				c.Parts, s.Name, r.Sources[0].Name)
		}
		if i > 0 && ps.ms[0].CreatedBy != by {
			return nil, fmt.Errorf("%s: source %q written by %q, source %q by %q: run every part with the same dataprep",
				c.Parts, s.Name, ps.ms[0].CreatedBy, r.Sources[0].Name, by)
		}
		opts, by = append(opts, o), ps.ms[0].CreatedBy
		srcs[i] = ms
		maxSeconds = max(maxSeconds, ps.maxSeconds)
		rawBytes += ps.rawBytes
		bytes += ps.bytes
	}
	tRead := time.Now()
	wc := commitConfig(opts[0], c.Out, c.Force, cc.Workers, cc.Progress)
	m, err := writeMix(ctx, &wc, r, srcs, by, func() float64 { return maxSeconds + time.Since(t0).Seconds() })
	if err != nil {
		return nil, err
	}
	return &Result{Manifest: m, Format: mixFormat(srcs), InputBytes: rawBytes, Bytes: bytes,
		Read: tRead.Sub(t0), Write: time.Since(tRead)}, nil
}

// sameJSON reports whether a and b encode to the same JSON.
func sameJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return slices.Equal(x, y)
}
