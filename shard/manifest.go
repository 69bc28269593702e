package shard

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ferryml/ferry/internal/corrupt"
)

// MaxManifestBytes bounds the manifest file a reader accepts.
const MaxManifestBytes = 256 << 20

// Manifest is manifest.json: the authoritative description of a shard directory.
type Manifest struct {
	Format       string `json:"format"`
	Version      int    `json:"version"`
	CreatedBy    string `json:"created_by"`
	SeqLen       int    `json:"seq_len"`
	Mode         Mode   `json:"mode"`
	Labels       Labels `json:"labels"`
	Ranks        int    `json:"ranks"`
	RowsPerRank  int    `json:"rows_per_rank"`
	UniqueRows   int    `json:"unique_rows"`
	TotalRows    int    `json:"total_rows"`
	DropLast     bool   `json:"drop_last"`
	Seed         uint64 `json:"seed"`
	BatchRows    int    `json:"batch_rows"`
	Template     string `json:"template"`
	TemplateText string `json:"template_text"`
	// Chat is set for chat-format input (dataprep --format chat): the chat
	// template's SHA-256 and the date strftime_now rendered.
	Chat      *ChatInfo     `json:"chat,omitempty"`
	Tokenizer TokenizerInfo `json:"tokenizer"`
	Input     string        `json:"input,omitempty"`
	Files     []FileEntry   `json:"files"`
	// LossTokens, when present, describes loss_tokens.u32: every row's
	// loss-token count (labels[1:] != −100, the tokens HF's causal-LM loss
	// averages over) as a little-endian uint32, rank-major (rank r's rows
	// are entries [r·rows_per_rank, (r+1)·rows_per_rank)). A loader counts
	// an optimizer step's tokens over all ranks from it without opening the
	// other ranks' shards. Older outputs lack it.
	LossTokens *SideFile `json:"loss_tokens,omitempty"`
	// Sources, in recipe order, are the sources of a mixture (dataprep
	// --recipe): source k of a segment is Sources[k]. A manifest with
	// sources is version 2; one without, version 1.
	Sources []SourceInfo `json:"sources,omitempty"`
	Stats   Stats        `json:"stats"`
}

// SourceInfo is what a mixture asked of one source and what it got
// (docs/mixtures.md). Tokens count the source's examples in the unique
// rows (before drop_last and wrap-around), as stats.tokens does.
type SourceInfo struct {
	Name     string `json:"name"`
	Format   string `json:"format"`   // alpaca or chat
	Input    string `json:"input"`    // the files read, in order
	Labels   Labels `json:"labels"`   // the source's labels policy
	Template string `json:"template"` // the name of its (prompt or chat) template
	// Chat is a chat source's template SHA-256 and date (Manifest.Chat
	// is the first chat source's).
	Chat *ChatInfo `json:"chat,omitempty"`
	// Weight (a share of the output's tokens, as the recipe gives it) or
	// Repeat (epochs of the source): exactly one is set.
	Weight *float64 `json:"weight,omitempty"`
	Repeat *float64 `json:"repeat,omitempty"`

	RecordsRead    int64 `json:"records_read"`
	RecordsSkipped int64 `json:"records_skipped"`
	// RecordsUsed is the distinct records in the output, Uses the records
	// counted with their repeats, Repeats = Uses / the usable records.
	RecordsUsed int64   `json:"records_used"`
	Uses        int64   `json:"uses"`
	Repeats     float64 `json:"repeats"`
	Examples    int64   `json:"examples"` // examples in the output (a split record counts each piece)
	Tokens      int64   `json:"tokens"`
	// TokensAsked is the token target of a weighted source, or a repeat
	// source's tokens; Share and ShareAsked are Tokens and TokensAsked
	// over the output's tokens.
	TokensAsked int64   `json:"tokens_asked"`
	Share       float64 `json:"share"`
	ShareAsked  float64 `json:"share_asked"`
}

// ChatInfo is what a chat-format run rendered its conversations with.
type ChatInfo struct {
	TemplateSHA256 string `json:"template_sha256"` // SHA-256 of the chat template's text
	Date           string `json:"date"`            // YYYY-MM-DD strftime_now returned
}

// SideFile describes a file of the directory beside the shards.
type SideFile struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
	Total  int64  `json:"total"` // the sum of its entries
}

// TokenizerInfo identifies the tokenizer and its special tokens. A nil ID
// or name means the tokenizer has no such token.
type TokenizerInfo struct {
	SHA256 string  `json:"sha256"`
	BOSID  *int32  `json:"bos_id"`
	EOSID  *int32  `json:"eos_id"`
	PadID  int32   `json:"pad_id"`
	EOS    *string `json:"eos"`
	Pad    *string `json:"pad"`
	BOS    *string `json:"bos"`
	AddBOS bool    `json:"add_bos"`
	AddEOS bool    `json:"add_eos"`
	// Path is where the tokenizer was loaded from (informational; inspect
	// uses it to decode rows when its SHA-256 still matches).
	Path string `json:"path,omitempty"`
}

// FileEntry describes one shard file.
type FileEntry struct {
	Rank    int          `json:"rank"`
	Path    string       `json:"path"`
	Bytes   int64        `json:"bytes"`
	SHA256  string       `json:"sha256"`
	Rows    int          `json:"rows"`
	Batches []BatchEntry `json:"batches"`
}

// BatchEntry locates one record batch's values buffers in its file.
type BatchEntry struct {
	RowStart int                  `json:"row_start"`
	Rows     int                  `json:"rows"`
	Buffers  map[string]BufferRef `json:"buffers"`
}

// Stats are the run statistics stored in the manifest.
type Stats struct {
	RecordsRead      int64 `json:"records_read"`
	RecordsSkipped   int64 `json:"records_skipped"`
	RecordsTruncated int64 `json:"records_truncated"`
	RecordsSplit     int64 `json:"records_split,omitempty"`
	// RecordsDropped counts the conversations dropped because truncation
	// cut off every token they train.
	RecordsDropped int64   `json:"records_dropped,omitempty"`
	Tokens         int64   `json:"tokens"`     // non-pad tokens in the unique rows
	PadTokens      int64   `json:"pad_tokens"` // pad positions in the unique rows
	Efficiency     float64 `json:"efficiency"` // tokens / (unique_rows × seq_len)
	RowsDropped    int64   `json:"rows_dropped,omitempty"`
	RowsRepeated   int64   `json:"rows_repeated,omitempty"`
	InputBytes     int64   `json:"input_bytes,omitempty"`
	Seconds        float64 `json:"seconds"`
}

// Validate checks the manifest's internal consistency (not the files).
func (m *Manifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: manifest: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	if m.Format != FormatName {
		return bad("format %q, want %q", m.Format, FormatName)
	}
	if m.Version < FormatVersionNoSources || m.Version > FormatVersion {
		return bad("version %d, this reader knows %d..%d", m.Version, FormatVersionNoSources, FormatVersion)
	}
	if (m.Version == FormatVersion) != (len(m.Sources) > 0) {
		return bad("version %d with %d sources: version %d has sources, version %d none", m.Version, len(m.Sources), FormatVersion, FormatVersionNoSources)
	}
	fm := FileMeta{Rank: 0, Ranks: m.Ranks, SeqLen: m.SeqLen, Mode: m.Mode, Labels: m.Labels}
	if err := fm.validate(); err != nil {
		return bad("%v", err)
	}
	if m.RowsPerRank < 0 || m.TotalRows != m.Ranks*m.RowsPerRank {
		return bad("total_rows %d != ranks %d × rows_per_rank %d", m.TotalRows, m.Ranks, m.RowsPerRank)
	}
	if m.UniqueRows < 0 || (!m.DropLast && m.UniqueRows > m.TotalRows) || (m.DropLast && m.UniqueRows < m.TotalRows) {
		return bad("unique_rows %d inconsistent with total_rows %d (drop_last %v)", m.UniqueRows, m.TotalRows, m.DropLast)
	}
	if m.BatchRows < 1 || m.BatchRows > MaxBatchRows {
		return bad("batch_rows %d, want 1..%d", m.BatchRows, MaxBatchRows)
	}
	if len(m.Files) != m.Ranks {
		return bad("%d files for %d ranks", len(m.Files), m.Ranks)
	}
	if lt := m.LossTokens; lt != nil {
		if lt.Path != LossTokensName || lt.Bytes != 4*int64(m.TotalRows) || lt.Total < 0 {
			return bad("loss_tokens %+v, want path %q, bytes 4 × total_rows = %d", *lt, LossTokensName, 4*int64(m.TotalRows))
		}
	}
	for i := range m.Files {
		f := &m.Files[i]
		if f.Path == "" || strings.ContainsAny(f.Path, `/\`) || strings.Contains(f.Path, "..") {
			return bad("files[%d].path %q is not a plain file name", i, f.Path)
		}
		if f.Rank != i || f.Path != FileName(i, m.Ranks) {
			return bad("files[%d] is rank %d %q, want rank %d %q", i, f.Rank, f.Path, i, FileName(i, m.Ranks))
		}
		if f.Rows != m.RowsPerRank {
			return bad("%s has %d rows, want rows_per_rank %d", f.Path, f.Rows, m.RowsPerRank)
		}
		if f.Bytes < 0 {
			return bad("%s has %d bytes", f.Path, f.Bytes)
		}
		if err := m.validateBatches(f); err != nil {
			return bad("%v", err)
		}
	}
	return nil
}

// validateBatches checks a file entry's batches against batch_rows and its
// rows (every batch holds batch_rows rows, the last one 1..batch_rows, in
// order from row 0), and that every buffer lies 8-byte aligned inside the
// file, so that a reader without Arrow can view the file at these offsets.
func (m *Manifest) validateBatches(f *FileEntry) error {
	next := 0
	for bi, b := range f.Batches {
		if b.RowStart != next || b.Rows < 1 || b.Rows > m.BatchRows || (b.Rows != m.BatchRows && bi != len(f.Batches)-1) {
			return fmt.Errorf("%s batch %d: row_start %d rows %d, want row_start %d and %d rows (fewer only in the last batch)",
				f.Path, bi, b.RowStart, b.Rows, next, m.BatchRows)
		}
		next += b.Rows
		for _, k := range slices.Sorted(maps.Keys(b.Buffers)) {
			e := b.Buffers[k]
			if e.Offset < 0 || e.Length < 0 || e.Offset%8 != 0 || e.Offset > f.Bytes || e.Length > f.Bytes-e.Offset {
				return fmt.Errorf("%s batch %d: buffer %q at offset %d length %d is outside the %d-byte file or unaligned",
					f.Path, bi, k, e.Offset, e.Length, f.Bytes)
			}
		}
	}
	if next != f.Rows {
		return fmt.Errorf("%s: batches hold %d rows, manifest says %d", f.Path, next, f.Rows)
	}
	return nil
}

// ReadManifest reads and validates dir/manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	p := filepath.Join(dir, ManifestName)
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return DecodeManifest(p, f)
}

// readManifestBytes reads a manifest or part manifest of at most
// MaxManifestBytes from r; name is used in errors.
func readManifestBytes(name string, r io.Reader) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("shard: %s: %w", name, err)
	}
	if len(data) > MaxManifestBytes {
		return nil, corrupt.New(ErrCorrupt, name, MaxManifestBytes, "larger than %d bytes", MaxManifestBytes)
	}
	return data, nil
}

// DecodeManifest decodes and validates a manifest read from r; name is used
// in errors.
func DecodeManifest(name string, r io.Reader) (*Manifest, error) {
	data, err := readManifestBytes(name, r)
	if err != nil {
		return nil, err
	}
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &m, nil
}

// ReadLossTokens reads dir's loss_tokens.u32 and checks it against the
// manifest (size, SHA-256, total): row j of rank r has counts[r][j] loss
// tokens. It returns ErrMissing-wrapped fs.ErrNotExist when the manifest
// lists no such file (outputs of older versions).
func ReadLossTokens(dir string, m *Manifest) ([][]uint32, error) {
	lt := m.LossTokens
	if lt == nil {
		return nil, fmt.Errorf("shard: %s: manifest lists no %s: %w", dir, LossTokensName, fs.ErrNotExist)
	}
	p := filepath.Join(dir, lt.Path)
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	if int64(len(data)) != lt.Bytes {
		return nil, fmt.Errorf("%w: %s: %d bytes, manifest says %d", ErrMismatch, p, len(data), lt.Bytes)
	}
	sum := sha256.Sum256(data)
	if h := hex.EncodeToString(sum[:]); !strings.EqualFold(h, lt.SHA256) {
		return nil, fmt.Errorf("%w: %s: sha256 %s, manifest says %s", ErrMismatch, p, h, lt.SHA256)
	}
	counts := make([][]uint32, m.Ranks)
	var total int64
	for r := range counts {
		counts[r] = make([]uint32, m.RowsPerRank)
		for j := range counts[r] {
			v := binary.LittleEndian.Uint32(data[4*(r*m.RowsPerRank+j):])
			counts[r][j] = v
			total += int64(v)
		}
	}
	if total != lt.Total {
		return nil, fmt.Errorf("%w: %s: entries sum to %d, manifest says %d", ErrMismatch, p, total, lt.Total)
	}
	return counts, nil
}

// LossTokens is the number of a row's tokens that carry loss in HF's
// causal-LM loss: labels[1:] != −100 (the loss shifts by one, so a row's
// first label never counts).
func (r *Row) LossTokens() uint32 {
	var n uint32
	for _, l := range r.Labels[min(1, len(r.Labels)):] {
		if l != IgnoreIndex {
			n++
		}
	}
	return n
}

// Encode returns the manifest as indented JSON with a final newline.
func (m *Manifest) Encode() ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// VerifyOption configures Verify.
type VerifyOption func(*verifyConfig)

type verifyConfig struct{ checksum bool }

// WithChecksum makes Verify hash every file and compare with the manifest's sha256.
func WithChecksum() VerifyOption { return func(c *verifyConfig) { c.checksum = true } }

// VerifyFile checks one mapped shard against its manifest entry: size, schema
// metadata, row count, batch layout and buffer offsets (and the SHA-256 with
// WithChecksum). Errors wrap ErrMismatch and name the reader's file.
func (m *Manifest) VerifyFile(r *Reader, rank int, opts ...VerifyOption) error {
	var c verifyConfig
	for _, o := range opts {
		o(&c)
	}
	if rank < 0 || rank >= len(m.Files) {
		return fmt.Errorf("%w: rank %d not in manifest (%d files)", ErrMismatch, rank, len(m.Files))
	}
	fe := &m.Files[rank]
	mis := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrMismatch, r.name, fmt.Sprintf(format, args...))
	}
	if r.Size() != fe.Bytes {
		return mis("%d bytes, manifest says %d", r.Size(), fe.Bytes)
	}
	if c.checksum {
		if err := checkSHA256(r.name, r.Bytes(), fe); err != nil {
			return err
		}
	}
	meta := r.Meta()
	if meta.Rank != rank || meta.Ranks != m.Ranks || meta.SeqLen != m.SeqLen || meta.Mode != m.Mode ||
		meta.Labels != m.Labels || meta.TokenizerSHA256 != m.Tokenizer.SHA256 || meta.Version() != m.Version {
		return mis("schema metadata %+v disagrees with the manifest", meta)
	}
	if r.NumRows() != fe.Rows {
		return mis("%d rows, manifest says %d", r.NumRows(), fe.Rows)
	}
	if r.NumBatches() != len(fe.Batches) {
		return mis("%d batches, manifest says %d", r.NumBatches(), len(fe.Batches))
	}
	for i, be := range fe.Batches {
		b := r.Batch(i)
		if b.RowStart != be.RowStart || b.Rows != be.Rows {
			return mis("batch %d rows [%d,+%d), manifest says [%d,+%d)", i, b.RowStart, b.Rows, be.RowStart, be.Rows)
		}
		got := b.Buffers()
		if len(got) != len(be.Buffers) {
			return mis("batch %d has %d buffers, manifest lists %d", i, len(got), len(be.Buffers))
		}
		for _, k := range slices.Sorted(maps.Keys(be.Buffers)) {
			if g, ok := got[k]; !ok || g != be.Buffers[k] {
				return mis("batch %d buffer %q at %+v, manifest says %+v", i, k, g, be.Buffers[k])
			}
		}
	}
	return nil
}

// checkSHA256 compares the SHA-256 of data, the file name, with fe's.
func checkSHA256(name string, data []byte, fe *FileEntry) error {
	sum := sha256.Sum256(data)
	if h := hex.EncodeToString(sum[:]); !strings.EqualFold(h, fe.SHA256) {
		return fmt.Errorf("%w: %s: sha256 %s, manifest says %s", ErrMismatch, name, h, fe.SHA256)
	}
	return nil
}

// OpenFile maps the shard of rank stored at path (the file m.Files[rank]
// names, in the manifest's directory or copied elsewhere) and checks it
// before it parses a byte of it: its size always (a file of another size is
// truncated or replaced: ErrCorrupt), its SHA-256 with WithChecksum
// (ErrMismatch). It then validates the whole structure, as Open does, and
// the file against its entry, as VerifyFile does. This is how every ferry
// reader of a shard directory opens a shard.
func (m *Manifest) OpenFile(path string, rank int, opts ...VerifyOption) (*Reader, error) {
	var c verifyConfig
	for _, o := range opts {
		o(&c)
	}
	if rank < 0 || rank >= len(m.Files) {
		return nil, fmt.Errorf("%w: rank %d, manifest has %d files", ErrConfig, rank, len(m.Files))
	}
	fe := &m.Files[rank]
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	r, err := func() (*Reader, error) {
		if int64(len(data)) != fe.Bytes {
			return nil, corrupt.New(ErrCorrupt, path, -1, "%d bytes, manifest says %d", len(data), fe.Bytes)
		}
		if c.checksum {
			if err := checkSHA256(path, data, fe); err != nil {
				return nil, err
			}
		}
		return newReader(path, data)
	}()
	if err != nil {
		_ = unmap()
		return nil, err
	}
	r.unmap = unmap
	if err := m.VerifyFile(r, rank); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// fileEntry builds the manifest entry of a mapped shard whose SHA-256 (hex)
// is sum.
func fileEntry(r *Reader, rank int, path, sum string) FileEntry {
	fe := FileEntry{Rank: rank, Path: path, Bytes: r.Size(), SHA256: sum, Rows: r.NumRows(),
		Batches: make([]BatchEntry, r.NumBatches())}
	for i := range fe.Batches {
		b := r.Batch(i)
		fe.Batches[i] = BatchEntry{RowStart: b.RowStart, Rows: b.Rows, Buffers: b.Buffers()}
	}
	return fe
}

// OpenDir reads dir's manifest and opens (maps) the shard of rank, checking
// it against the manifest.
func OpenDir(dir string, rank int, opts ...VerifyOption) (*Manifest, *Reader, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, nil, err
	}
	if rank < 0 || rank >= m.Ranks {
		return nil, nil, fmt.Errorf("%w: rank %d, directory has %d ranks", ErrConfig, rank, m.Ranks)
	}
	r, err := m.OpenFile(filepath.Join(dir, m.Files[rank].Path), rank, opts...)
	if err != nil {
		return nil, nil, err
	}
	return m, r, nil
}
