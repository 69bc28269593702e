package shard

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/apache/arrow-go/v18/arrow"
)

// Format identifiers written into every shard's schema metadata and the manifest.
const (
	FormatName = "ferry-shards"
	// FormatVersion is the newest format version; readers read every
	// version from FormatVersionNoSources up to it. Version 2 adds
	// segments.source (the recipe index of each segment's source): a
	// mixture's output (dataprep --recipe) is version 2; an output of one
	// source is written as version 1, byte for byte as before.
	FormatVersion = 2
	// FormatVersionNoSources is the version without segments.source.
	FormatVersionNoSources = 1
	ManifestName           = "manifest.json"
	// LossTokensName is the side file that holds every row's loss-token
	// count (see Manifest.LossTokens).
	LossTokensName = "loss_tokens.u32"

	// IgnoreIndex is the label value that carries no loss (PyTorch's
	// CrossEntropyLoss ignore_index).
	IgnoreIndex = -100

	// DefaultBatchRows is the default number of rows per record batch.
	DefaultBatchRows = 1024
	// MaxBatchRows bounds batch_rows.
	MaxBatchRows = 1 << 20

	// MaxSeqLen bounds seq_len so that one row's byte size, and the offsets
	// derived from it, always fit comfortably in int32/int64 arithmetic.
	MaxSeqLen = 1 << 20
	// MaxRanks bounds the number of shards in one directory.
	MaxRanks = 1 << 16
)

// Column names.
const (
	ColInputIDs    = "input_ids"
	ColLabels      = "labels"
	ColPositionIDs = "position_ids"
	ColLength      = "length"
	ColSegments    = "segments"
)

// Schema metadata keys.
const (
	MetaFormat    = "ferry.format"
	MetaVersion   = "ferry.version"
	MetaRank      = "ferry.rank"
	MetaRanks     = "ferry.ranks"
	MetaSeqLen    = "ferry.seq_len"
	MetaMode      = "ferry.mode"
	MetaLabels    = "ferry.labels"
	MetaTokenizer = "ferry.tokenizer_sha256"
)

// Errors. Every error returned by this package wraps one of these where it
// applies, so callers can match with errors.Is.
var (
	// ErrCorrupt marks a shard or manifest that breaks the format contract.
	ErrCorrupt = errors.New("shard: corrupt")
	// ErrMismatch marks a shard that is well formed but does not match its manifest.
	ErrMismatch = errors.New("shard: does not match manifest")
	// ErrConfig marks an invalid writer configuration or row.
	ErrConfig = errors.New("shard: invalid config")
	// ErrTooFewRows is returned when there are fewer rows than ranks.
	ErrTooFewRows = errors.New("shard: fewer rows than ranks")
	// ErrExists is returned when the output directory already holds a result.
	ErrExists = errors.New("shard: output already exists")
	// ErrClosed is returned by a Writer or Reader used after Close.
	ErrClosed = errors.New("shard: closed")
)

// Mode is how rows are made from examples.
type Mode string

// Modes.
const (
	ModePad  Mode = "pad"  // one example per row, right-padded
	ModePack Mode = "pack" // whole examples packed into rows, position_ids restart per example
)

// Labels is the labels policy.
type Labels string

// Label policies.
const (
	LabelsMaskPad    Labels = "mask-pad"    // labels = input_ids, −100 on padding positions
	LabelsCopy       Labels = "copy"        // labels = input_ids, padding included (seed parity)
	LabelsMaskPrompt Labels = "mask-prompt" // −100 on padding and on the prompt

	// Chat policies (dataprep --format chat): −100 on padding and where
	// the example's Loss is false; which tokens train is dataprep's rule
	// (docs/chat.md).
	LabelsAssistant     Labels = "assistant"      // every assistant turn's content through its end-of-turn token
	LabelsLastAssistant Labels = "last-assistant" // the same for the final assistant turn only
	LabelsGeneration    Labels = "generation"     // the template's {% generation %} spans
	LabelsAll           Labels = "all"            // every non-pad token
)

// IsChat reports whether l is one of the chat policies.
func (l Labels) IsChat() bool {
	switch l {
	case LabelsAssistant, LabelsLastAssistant, LabelsGeneration, LabelsAll:
		return true
	}
	return false
}

// ParseMode parses "pad" or "pack".
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModePad, ModePack:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%w: mode %q, want pad or pack", ErrConfig, s)
}

// ParseLabels parses a labels policy name.
func ParseLabels(s string) (Labels, error) {
	switch Labels(s) {
	case LabelsMaskPad, LabelsCopy, LabelsMaskPrompt, LabelsAssistant, LabelsLastAssistant, LabelsGeneration, LabelsAll:
		return Labels(s), nil
	}
	return "", fmt.Errorf("%w: labels %q, want mask-pad, copy, mask-prompt, assistant, last-assistant, generation or all", ErrConfig, s)
}

// FileName returns the shard file name of rank among ranks.
func FileName(rank, ranks int) string {
	return fmt.Sprintf("rank-%05d-of-%05d.arrow", rank, ranks)
}

// FileMeta is what one shard file states about itself in its schema metadata.
type FileMeta struct {
	Rank, Ranks     int
	SeqLen          int
	Mode            Mode
	Labels          Labels
	TokenizerSHA256 string
	// Sources is set when the segments carry source (format version 2,
	// the output of a mixture).
	Sources bool
}

// Version is the format version of a file with this metadata.
func (m FileMeta) Version() int {
	if m.Sources {
		return FormatVersion
	}
	return FormatVersionNoSources
}

func (m FileMeta) validate() error {
	if m.SeqLen < 1 || m.SeqLen > MaxSeqLen {
		return fmt.Errorf("%w: seq_len %d, want 1..%d", ErrConfig, m.SeqLen, MaxSeqLen)
	}
	if m.Ranks < 1 || m.Ranks > MaxRanks {
		return fmt.Errorf("%w: ranks %d, want 1..%d", ErrConfig, m.Ranks, MaxRanks)
	}
	if m.Rank < 0 || m.Rank >= m.Ranks {
		return fmt.Errorf("%w: rank %d of %d", ErrConfig, m.Rank, m.Ranks)
	}
	if _, err := ParseMode(string(m.Mode)); err != nil {
		return err
	}
	if _, err := ParseLabels(string(m.Labels)); err != nil {
		return err
	}
	return nil
}

var segmentFields = []arrow.Field{
	{Name: "sample", Type: arrow.PrimitiveTypes.Int64},
	{Name: "start", Type: arrow.PrimitiveTypes.Int32},
	{Name: "length", Type: arrow.PrimitiveTypes.Int32},
	{Name: "source", Type: arrow.PrimitiveTypes.Int32}, // version 2 only
}

var (
	segmentTypeV1 = arrow.StructOf(segmentFields[:3]...)
	segmentTypeV2 = arrow.StructOf(segmentFields...)
)

// segmentType is the struct type of one segment in a file of meta m.
func segmentType(m FileMeta) *arrow.StructType {
	if m.Sources {
		return segmentTypeV2
	}
	return segmentTypeV1
}

func tokenListType(seqLen int) *arrow.FixedSizeListType {
	t := arrow.FixedSizeListOfNonNullable(int32(seqLen), arrow.PrimitiveTypes.Int32)
	return t
}

// Schema returns the Arrow schema of a shard with the given metadata.
func Schema(m FileMeta) *arrow.Schema {
	tl := tokenListType(m.SeqLen)
	fields := []arrow.Field{
		{Name: ColInputIDs, Type: tl},
		{Name: ColLabels, Type: tl},
	}
	if m.Mode == ModePack {
		fields = append(fields, arrow.Field{Name: ColPositionIDs, Type: tl})
	}
	fields = append(fields,
		arrow.Field{Name: ColLength, Type: arrow.PrimitiveTypes.Int32},
		arrow.Field{Name: ColSegments, Type: arrow.ListOfNonNullable(segmentType(m))},
	)
	md := arrow.NewMetadata(
		[]string{MetaFormat, MetaVersion, MetaRank, MetaRanks, MetaSeqLen, MetaMode, MetaLabels, MetaTokenizer},
		[]string{FormatName, strconv.Itoa(m.Version()), strconv.Itoa(m.Rank), strconv.Itoa(m.Ranks),
			strconv.Itoa(m.SeqLen), string(m.Mode), string(m.Labels), m.TokenizerSHA256},
	)
	return arrow.NewSchema(fields, &md)
}

// Segment says which source record a run of tokens in a row comes from.
type Segment struct {
	Sample int64 // 0-based record index in the input (a mixture: in its source)
	Start  int32 // first token position in the row
	Length int32 // tokens of that record in the row
	Source int32 // the source's index in the recipe; 0 in a version 1 file
}

// Row is one fixed-length training row. Slices returned by a Reader alias
// the mapped file; slices given to a Writer are copied.
type Row struct {
	InputIDs    []int32 // seq_len ids
	Labels      []int32 // seq_len labels
	PositionIDs []int32 // seq_len position ids; pack mode only (nil in pad mode)
	Length      int32   // non-pad tokens; attention_mask[j] = j < Length
	Segments    []Segment
}
