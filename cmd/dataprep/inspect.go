package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/ferryml/ferry/internal/cli"
	"github.com/ferryml/ferry/internal/prep"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
)

const inspectUsage = `usage: dataprep inspect DIR [--rank R --row N] [--tokenizer PATH] [--verify] [--json]

Prints the manifest summary of a shard directory and one row: its segments
(source records), and its tokens decoded back to text with the tokenizer the
manifest names (or --tokenizer).

Flags:
`

func runInspect(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dataprep inspect", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, inspectUsage)
		fs.PrintDefaults()
	}
	rank := fs.Int("rank", 0, "shard to open")
	row := fs.Int("row", -1, "row to show (-1: none)")
	tokPath := fs.String("tokenizer", "", "tokenizer to decode with (default: the manifest's tokenizer.path)")
	verify := fs.Bool("verify", false, "check every shard's size, structure and SHA-256 against the manifest")
	full := fs.Bool("full", false, "print the whole decoded text of each segment")
	jsonOut := fs.Bool("json", false, "print the manifest (and the row's ids) as JSON")
	pos, err := cli.ParseInterspersed(fs, args)
	if err != nil {
		return err
	}
	var dir string
	if len(pos) > 0 {
		dir = pos[0]
	}
	if dir == "" {
		fs.Usage()
		return fmt.Errorf("%w: inspect needs a directory", errUsage)
	}
	if _, local := storage.LocalPath(dir); !local {
		return fmt.Errorf("%w: inspect reads local directories; copy the shards first", errUsage)
	}
	m, err := shard.ReadManifest(dir)
	if err != nil {
		return err
	}
	if *jsonOut {
		b, _ := json.MarshalIndent(m, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		printManifest(stdout, dir, m)
	}
	if *verify {
		if err := prep.Verify(dir, m); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "verify: %d shards match the manifest (size, structure, sha256)\n", m.Ranks)
	}
	if *row < 0 {
		return ctx.Err()
	}
	_, rd, err := shard.OpenDir(dir, *rank)
	if err != nil {
		return err
	}
	defer rd.Close()
	var r shard.Row
	if err := rd.Row(*row, &r); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	tok, err := prep.InspectTokenizer(m, *tokPath, loadTokenizer)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nrank %d row %d (global position %d): length %d of %d, %d segment(s)\n",
		*rank, *row, *row*m.Ranks+*rank, r.Length, m.SeqLen, len(r.Segments))
	for _, s := range prep.DescribeRow(&r, m, tok) {
		src := ""
		if int(s.Source) < len(m.Sources) {
			src = fmt.Sprintf("source %d (%s) ", s.Source, m.Sources[s.Source].Name)
		}
		fmt.Fprintf(stdout, "  %ssample %d: tokens [%d, %d)\n", src, s.Sample, s.Start, s.Start+s.Length)
		fmt.Fprintf(stdout, "    ids     %s\n", idsPreview(s.IDs))
		fmt.Fprintf(stdout, "    labels  %d of %d tokens carry loss\n", s.Loss, len(s.IDs))
		if s.Chat {
			// chat rows: the trained spans marked, in green on a terminal
			color := cli.IsTerminal(stdout)
			var b strings.Builder
			runs := 0
			for _, sp := range s.Spans {
				switch {
				case !sp.Trained:
					b.WriteString(sp.Text)
				case color:
					b.WriteString("\x1b[1;32m" + sp.Text + "\x1b[0m")
				default:
					b.WriteString("[[" + sp.Text + "]]")
				}
				if sp.Trained {
					runs++
				}
			}
			fmt.Fprintf(stdout, "    trained %d span(s), %d tokens; truncated: %v\n", runs, s.Loss, s.Truncated)
			how := "in [[ ]]"
			if color {
				how = "in green"
			}
			fmt.Fprintf(stdout, "    text    (trained spans %s)\n%s\n", how, b.String())
			continue
		}
		if tok != nil {
			text := s.Text
			if r := []rune(text); len(r) > 300 && !*full {
				text = string(r[:200]) + " … " + string(r[len(r)-80:])
			}
			fmt.Fprintf(stdout, "    text    %q\n", text)
		}
	}
	if tok == nil {
		fmt.Fprintf(stdout, "  (no tokenizer to decode with: pass --tokenizer; manifest path %q)\n", m.Tokenizer.Path)
	}
	return nil
}

func idsPreview(ids []int32) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, id := range ids {
		if i == 12 && len(ids) > 16 {
			fmt.Fprintf(&b, " … (%d more) …", len(ids)-16)
			for _, t := range ids[len(ids)-4:] {
				fmt.Fprintf(&b, " %d", t)
			}
			break
		}
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d", id)
	}
	b.WriteByte(']')
	return b.String()
}

func printManifest(w io.Writer, dir string, m *shard.Manifest) {
	var bytes int64
	for _, f := range m.Files {
		bytes += f.Bytes
	}
	fmt.Fprintf(w, "%s: %s v%d, %s\n", filepath.Clean(dir), m.Format, m.Version, m.CreatedBy)
	if m.Input != "" {
		fmt.Fprintf(w, "  input      %s\n", m.Input)
	}
	fmt.Fprintf(w, "  layout     %d ranks × %d rows × %d tokens (%d unique rows, %d total; drop_last %v, seed %d)\n",
		m.Ranks, m.RowsPerRank, m.SeqLen, m.UniqueRows, m.TotalRows, m.DropLast, m.Seed)
	fmt.Fprintf(w, "  mode       %s, labels %s, template %s\n", m.Mode, m.Labels, m.Template)
	tk := m.Tokenizer
	str := func(s *string) string {
		if s == nil {
			return "none"
		}
		return fmt.Sprintf("%q", *s)
	}
	id := func(i *int32) string {
		if i == nil {
			return "none"
		}
		return fmt.Sprint(*i)
	}
	fmt.Fprintf(w, "  tokenizer  sha256 %.16s… eos %s (%s), pad %s (%d), bos %s (%s), add_bos %v\n",
		tk.SHA256, str(tk.EOS), id(tk.EOSID), str(tk.Pad), tk.PadID, str(tk.BOS), id(tk.BOSID), tk.AddBOS)
	st := m.Stats
	fmt.Fprintf(w, "  records    %d read, %d skipped, %d truncated\n", st.RecordsRead, st.RecordsSkipped, st.RecordsTruncated)
	fmt.Fprintf(w, "  tokens     %d (+%d pad), efficiency %.1f%%\n", st.Tokens, st.PadTokens, 100*st.Efficiency)
	for i, src := range m.Sources {
		fmt.Fprintf(w, "  source %d   %s (%s): %d records used %.2f times on average, %d tokens, share %.4f (asked %.4f)\n",
			i, src.Name, src.Format, src.RecordsUsed, src.Repeats, src.Tokens, src.Share, src.ShareAsked)
	}
	fmt.Fprintf(w, "  files      %d, %.1f MB, %d batch(es) of up to %d rows each\n", len(m.Files), float64(bytes)/1e6, len(m.Files[0].Batches), m.BatchRows)
}
