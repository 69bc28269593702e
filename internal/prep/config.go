package prep

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// ErrConfig marks a configuration that cannot run (a bad option, an EOS or
// pad token the tokenizer does not have, a SeqLen too small for the
// template): the caller's mistake, not the input's. Messages name the
// dataprep flag of the field.
var ErrConfig = errors.New("bad configuration")

func configErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
}

// Config is one run of the pipeline. Zero values take the defaults stated
// on each field. Each field names its dataprep flag.
//
// The input is Alpaca records (instruction, input, output) rendered by a
// template. A second input format gets its own fields here beside
// TemplateFile, its reader in internal/dataset and its rendering in
// internal/encode; load picks them, and the part manifest's options record
// them, so that Run, RunPart and Commit stay as they are.
type Config struct {
	// Inputs are the input files, paths or s3:// URLs, or globs of
	// several, read in order (--input; required unless Recipe).
	Inputs []string
	// Recipe is a mixture's recipe file (--recipe; docs/mixtures.md):
	// sources with their own inputs, format and weight or repeat, instead
	// of Inputs. Format, TemplateFile, ChatTemplate, ChatTemplateName and
	// Layout.Labels are then defaults for the sources of their format.
	Recipe string
	// SkipBad skips bad records and counts them (--on-bad-record skip);
	// default: the first bad record fails the run.
	SkipBad bool
	// MaxRecords uses only the input's first MaxRecords records, in
	// input order; 0: all (--max-records).
	MaxRecords int64
	// TemplateFile is the prompt template (--template); default: the
	// seeds' Alpaca prompt.
	TemplateFile string

	// Format is the input format (--format): FormatAlpaca, FormatChat, or
	// FormatAuto (the default), which reads chat data when the first
	// record has "messages" or "conversations".
	Format string
	// ChatTemplate is a Jinja chat template file to use instead of the
	// tokenizer directory's (--chat-template; chat only).
	ChatTemplate string
	// ChatTemplateName picks one of the directory's named chat templates
	// (--template-name, e.g. tool_use); default "default".
	ChatTemplateName string
	// Date pins strftime_now to YYYY-MM-DD, midnight UTC (--date; chat
	// only); default: the run's start, in local time, as transformers.
	Date string

	// Tokenizer is tokenizer.json, .json.zst or a model directory
	// (--tokenizer; required).
	Tokenizer string
	// LoadTokenizer loads it; default tokenize.Load.
	LoadTokenizer func(path string) (*tokenize.Tokenizer, error)
	// EOS is the token the template appends (--eos); nil: the tokenizer's
	// eos_token; "" none.
	EOS *string
	// Pad is the padding token (--pad); nil: the tokenizer's pad_token,
	// else the EOS token.
	Pad *string
	// NoSpecial leaves out the post-processor's BOS/EOS (--no-special).
	NoSpecial bool

	// Layout is the rows' layout: SeqLen (--seq-len), Mode (--mode) and
	// Labels (--labels) are required; PadID is resolved from Pad.
	Layout shard.Layout
	// SplitLong splits an example longer than SeqLen into several
	// (--split-long; pack mode only).
	SplitLong bool
	// Ranks is the number of shards (--ranks; required, 1..MaxRanks).
	Ranks    int
	Seed     uint64 // --seed
	DropLast bool   // --drop-last
	// BatchRows is the rows per Arrow record batch (--batch-rows); default
	// shard.DefaultBatchRows.
	BatchRows int

	// Out is the output directory or s3:// prefix (--out; required).
	Out string
	// Force replaces an existing result in Out (--force).
	Force bool
	// Workers is the number of tokenizer workers (--workers); default
	// runtime.NumCPU(). The output is the same for any value.
	Workers int
	// Progress receives the phases and counts; nil: none.
	Progress Progress
}

// Progress receives a run's progress. Add is called from several
// goroutines.
type Progress interface {
	Phase(name string, total int64) // a new phase with total units (0: unknown)
	Add(n int64)                    // n more units of the phase done
	Logf(format string, a ...any)   // a message line
}

type noProgress struct{}

func (noProgress) Phase(string, int64) {}
func (noProgress) Add(int64)           {}
func (noProgress) Logf(string, ...any) {}

// Validate checks c's own consistency (what can be checked without
// reading a byte); its errors wrap ErrConfig.
func (c *Config) Validate() error {
	l := c.Layout
	switch {
	case len(c.Inputs) == 0 && c.Recipe == "":
		return configErr("--input (or --recipe) is required")
	case len(c.Inputs) > 0 && c.Recipe != "":
		return configErr("--input and --recipe: a recipe names its sources' inputs")
	case c.Recipe != "" && c.MaxRecords != 0:
		return configErr("--max-records with --recipe: give a source max_records in the recipe")
	case c.Tokenizer == "":
		return configErr("--tokenizer is required")
	case c.Out == "":
		return configErr("--out is required")
	case l.SeqLen < 1 || l.SeqLen > shard.MaxSeqLen:
		return configErr("--seq-len %d: want 1..%d", l.SeqLen, shard.MaxSeqLen)
	case c.Ranks < 1 || c.Ranks > shard.MaxRanks:
		return configErr("--ranks %d: want 1..%d", c.Ranks, shard.MaxRanks)
	case c.SplitLong && l.Mode != shard.ModePack:
		return configErr("--split-long needs --mode pack")
	case c.Workers < 0:
		return configErr("--workers %d: want >= 1", c.Workers)
	case c.MaxRecords < 0:
		return configErr("--max-records %d: want >= 1 (or 0: all)", c.MaxRecords)
	case c.BatchRows < 0 || c.BatchRows > 1<<20:
		return configErr("--batch-rows %d: want 1..%d", c.BatchRows, 1<<20)
	}
	if _, err := shard.ParseMode(string(l.Mode)); err != nil {
		return configErr("--mode %q: want pad or pack", l.Mode)
	}
	if _, err := shard.ParseLabels(string(l.Labels)); err != nil && l.Labels != "" {
		return configErr("--labels %q: want mask-pad, copy or mask-prompt (alpaca), assistant, last-assistant, generation or all (chat)", l.Labels)
	}
	switch c.Format {
	case FormatAuto, FormatAlpaca, FormatChat:
	default:
		return configErr("--format %q: want alpaca or chat", c.Format)
	}
	if c.Format == FormatAlpaca && c.Recipe == "" && (l.Labels.IsChat() || c.ChatTemplate != "" || c.Date != "") {
		return configErr("--labels %s, --chat-template and --date are for --format chat", l.Labels)
	}
	return nil
}

// withDefaults returns c with its defaults filled in.
func (c Config) withDefaults() Config {
	if c.LoadTokenizer == nil {
		c.LoadTokenizer = tokenize.Load
	}
	if c.BatchRows == 0 {
		c.BatchRows = shard.DefaultBatchRows
	}
	if c.Workers == 0 {
		c.Workers = runtime.NumCPU()
	}
	if c.Progress == nil {
		c.Progress = noProgress{}
	}
	return c
}

// onBadRecord is the part manifest's name of SkipBad.
func (c *Config) onBadRecord() string {
	if c.SkipBad {
		return "skip"
	}
	return "error"
}

// createdBy is the manifest's created_by.
func createdBy() string { return "ferry dataprep (" + runtime.Version() + ")" }

// refuseExisting fails with shard.ErrExists when out holds a result and
// force is not set: checked before any work (WriteDir checks again before
// writing).
func refuseExisting(ctx context.Context, out string, force bool) error {
	if force {
		return nil
	}
	mloc := storage.Join(out, shard.ManifestName)
	if _, err := storage.Stat(ctx, mloc); err == nil {
		return fmt.Errorf("%w: %s (use --force to replace it)", shard.ErrExists, mloc)
	}
	return nil
}

// skipLog handles the bad records of --on-bad-record skip: it logs the
// first skipShown of them and counts them all. Safe for concurrent use.
type skipLog struct {
	prog Progress
	n    atomic.Int64
}

const skipShown = 5

// handler is the dataset.Options.OnBad of c: the log's, or nil (the first
// bad record fails the run) without SkipBad.
func (s *skipLog) handler(c *Config) func(*dataset.RecordError) error {
	if !c.SkipBad {
		return nil
	}
	return func(e *dataset.RecordError) error {
		if s.n.Add(1) <= skipShown {
			s.prog.Logf("skipped: %v", e)
		}
		return nil
	}
}

// done logs how many were skipped in all when some were not shown.
func (s *skipLog) done(what string) {
	if k := s.n.Load(); k > skipShown {
		s.prog.Logf("skipped %d %s in all (first %d shown)", k, what, skipShown)
	}
}
