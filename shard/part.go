package shard

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/ferryml/ferry/internal/corrupt"
)

// Part files: the tokenized examples of one part of a split dataprep run
// (dataprep --part I/N: internal/prep.RunPart), which dataprep commit
// (prep.Commit) lays out into a shard directory. docs/parts.md is the
// contract.
//
//	part-IIIII-of-NNNNN.bin (little-endian):
//	  +-----------+---------+----------+----------+----------+
//	  | "FERRYPT\0" | version | features | examples | tokens   |  32-byte header
//	  | 8 bytes   | u32 = 2 | u32      | u64 (n)  | u64 (t)  |
//	  +-----------+---------+----------+----------+----------+
//	  | n entries of 16 bytes: sample u64 (record index within the part),  |
//	  |   length u32 (1..MaxSeqLen), prompt u32 (low 24 bits, <= length;   |
//	  |   high 8 bits: flags, PartTruncated | PartSplit)                   |
//	  +--------------------------------------------------------------------+
//	  | t token ids, int32; example k's are the length_k after those of    |
//	  |   examples 0..k-1 (t = the sum of the lengths)                     |
//	  +--------------------------------------------------------------------+
//	  | features & PartHasLoss: ceil(t/8) bytes, one bit per token id in   |
//	  |   the same order, LSB first: 1 = the token carries loss            |
//	  |   (Example.Loss; chat data), 0 = label −100; unused bits are 0     |
//	  +--------------------------------------------------------------------+
//	file size = 32 + 16 n + 4 t (+ ceil(t/8) with PartHasLoss) exactly.
//
//	part-IIIII-of-NNNNN.json: the PartManifest, written after the .bin.
const (
	PartMagic         = "FERRYPT\x00"
	PartFormatName    = "ferry-part"
	PartFormatVersion = 2
	partHeaderSize    = 32
	partEntrySize     = 16
	// MaxParts bounds N of a split run.
	MaxParts = 1 << 16
)

// Example flags in a part file: what fitting the example's record into
// seq_len did (counted into records_truncated and records_split).
const (
	PartTruncated uint8 = 1 << 0 // the record was cut to seq_len
	PartSplit     uint8 = 1 << 1 // the first piece of a record split into several
)

// Part file features (the header's u32 at byte 12).
const (
	// PartHasLoss: the file ends with the loss bitmap of its tokens, and
	// every example read from it has a Loss (the examples had one).
	PartHasLoss uint32 = 1 << 0
)

// partName is the stem of part i of n's files: "part-%05d-of-%05d".
const partName = "part-%05d-of-%05d"

// PartFileName is the name of part i of n's examples file.
func PartFileName(i, n int) string { return fmt.Sprintf(partName+".bin", i, n) }

// PartManifestName is the name of part i of n's manifest.
func PartManifestName(i, n int) string { return fmt.Sprintf(partName+".json", i, n) }

// ParsePartManifestName is the inverse of PartManifestName: ok reports
// whether name is PartManifestName(i, n) for some i, n >= 0 (it does not
// check i < n or the bounds of n; a split run's checks do).
func ParsePartManifestName(name string) (i, n int, ok bool) {
	if _, err := fmt.Sscanf(name, "part-%d-of-%d.json", &i, &n); err != nil || i < 0 || n < 0 {
		return 0, 0, false
	}
	if PartManifestName(i, n) != name {
		return 0, 0, false
	}
	return i, n, true
}

// WritePart writes exs (with their flags, one per example) as a part file
// to w, and returns its size and SHA-256 (hex). When any example has a
// Loss, the file holds every token's loss bit (PartHasLoss; an example
// without one is written as trained throughout, which is what a nil Loss
// means).
func WritePart(w io.Writer, exs []Example, flags []uint8) (int64, string, error) {
	if len(flags) != len(exs) {
		return 0, "", fmt.Errorf("%w: %d flags for %d examples", ErrConfig, len(flags), len(exs))
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 1<<20)
	var tokens int64
	var features uint32
	for i, e := range exs {
		tokens += int64(len(e.Tokens))
		if e.Loss != nil {
			if len(e.Loss) != len(e.Tokens) {
				return 0, "", fmt.Errorf("%w: example %d: %d loss flags for %d tokens", ErrConfig, i, len(e.Loss), len(e.Tokens))
			}
			features |= PartHasLoss
		}
	}
	var hdr [partHeaderSize]byte
	copy(hdr[:], PartMagic)
	binary.LittleEndian.PutUint32(hdr[8:], PartFormatVersion)
	binary.LittleEndian.PutUint32(hdr[12:], features)
	binary.LittleEndian.PutUint64(hdr[16:], uint64(len(exs)))
	binary.LittleEndian.PutUint64(hdr[24:], uint64(tokens))
	bw.Write(hdr[:])
	var ent [partEntrySize]byte
	for i, e := range exs {
		if len(e.Tokens) < 1 || len(e.Tokens) > MaxSeqLen || e.Prompt < 0 || e.Prompt > len(e.Tokens) || e.Sample < 0 {
			return 0, "", fmt.Errorf("%w: example %d: %d tokens, prompt %d, sample %d", ErrConfig, i, len(e.Tokens), e.Prompt, e.Sample)
		}
		binary.LittleEndian.PutUint64(ent[0:], uint64(e.Sample))
		binary.LittleEndian.PutUint32(ent[8:], uint32(len(e.Tokens)))
		binary.LittleEndian.PutUint32(ent[12:], uint32(e.Prompt)|uint32(flags[i])<<24)
		bw.Write(ent[:])
	}
	var b [4]byte
	for _, e := range exs {
		for _, t := range e.Tokens {
			binary.LittleEndian.PutUint32(b[:], uint32(t))
			bw.Write(b[:])
		}
	}
	size := int64(partHeaderSize) + partEntrySize*int64(len(exs)) + 4*tokens
	if features&PartHasLoss != 0 {
		var acc byte
		var nbit uint
		for _, e := range exs {
			for j := range e.Tokens {
				if e.Loss == nil || e.Loss[j] {
					acc |= 1 << nbit
				}
				if nbit++; nbit == 8 {
					bw.WriteByte(acc)
					acc, nbit = 0, 0
				}
			}
		}
		if nbit > 0 {
			bw.WriteByte(acc)
		}
		size += (tokens + 7) / 8
	}
	if err := bw.Flush(); err != nil {
		return 0, "", err
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

// Part is a parsed part file. Its slices alias the bytes it was made from.
type Part struct {
	entries []byte
	tokens  []int32
	loss    []byte // the loss bitmap (PartHasLoss), nil without
	n       int
	unmap   func() error
}

// NewPart parses and validates a part file held in data (the whole file),
// without copying it: data must stay unchanged while the Part is used.
// Every count is checked against len(data) before it is used.
func NewPart(data []byte) (*Part, error) {
	if len(data) < partHeaderSize {
		return nil, fmt.Errorf("%w: part file of %d bytes, shorter than its %d-byte header", ErrCorrupt, len(data), partHeaderSize)
	}
	if string(data[:8]) != PartMagic {
		return nil, corrupt.New(ErrCorrupt, "part file", 0, "magic %q, want %q", data[:8], PartMagic)
	}
	if v := binary.LittleEndian.Uint32(data[8:]); v != PartFormatVersion {
		return nil, corrupt.New(ErrCorrupt, "part file", 8, "version %d, this reader knows %d", v, PartFormatVersion)
	}
	features := binary.LittleEndian.Uint32(data[12:])
	if features&^PartHasLoss != 0 {
		return nil, corrupt.New(ErrCorrupt, "part file", 12, "unknown features %#x", features)
	}
	n := binary.LittleEndian.Uint64(data[16:])
	t := binary.LittleEndian.Uint64(data[24:])
	rest := uint64(len(data) - partHeaderSize)
	var lossBytes uint64
	if features&PartHasLoss != 0 {
		lossBytes = (t + 7) / 8
	}
	if n > rest/partEntrySize || t > rest/4 || n*partEntrySize+4*t+lossBytes != rest {
		return nil, fmt.Errorf("%w: part file: header says %d examples and %d tokens (features %#x), which do not fill the %d bytes after it exactly",
			ErrCorrupt, n, t, features, rest)
	}
	p := &Part{n: int(n), entries: data[partHeaderSize : partHeaderSize+n*partEntrySize]}
	tb := data[partHeaderSize+n*partEntrySize : uint64(len(data))-lossBytes]
	if len(tb) > 0 {
		p.tokens = arrow.Int32Traits.CastFromBytes(tb)
	}
	if features&PartHasLoss != 0 {
		p.loss = data[uint64(len(data))-lossBytes:]
		if r := t % 8; r != 0 && p.loss[len(p.loss)-1]>>r != 0 {
			return nil, corrupt.New(ErrCorrupt, "part file", int64(len(data)-1), "loss bitmap: unused bits set")
		}
	}
	var sum uint64
	var prev uint64
	for k := range p.n {
		e := p.entries[k*partEntrySize:]
		sample := binary.LittleEndian.Uint64(e)
		length := binary.LittleEndian.Uint32(e[8:])
		pf := binary.LittleEndian.Uint32(e[12:])
		prompt, flags := pf&(1<<24-1), uint8(pf>>24)
		off := int64(partHeaderSize) + int64(k)*partEntrySize
		switch {
		case length < 1 || length > MaxSeqLen:
			return nil, corrupt.New(ErrCorrupt, "part file", off, "example %d: length %d, want 1..%d", k, length, MaxSeqLen)
		case prompt > length:
			return nil, corrupt.New(ErrCorrupt, "part file", off, "example %d: prompt %d > length %d", k, prompt, length)
		case flags&^(PartTruncated|PartSplit) != 0:
			return nil, corrupt.New(ErrCorrupt, "part file", off, "example %d: unknown flags %#x", k, flags)
		case sample >= 1<<62 || sample < prev:
			return nil, corrupt.New(ErrCorrupt, "part file", off, "example %d: sample %d after %d, want ascending", k, sample, prev)
		}
		prev = sample
		sum += uint64(length)
		if sum > t {
			return nil, corrupt.New(ErrCorrupt, "part file", off, "example %d: lengths add up past the %d tokens", k, t)
		}
	}
	if sum != t {
		return nil, fmt.Errorf("%w: part file: lengths add up to %d, the header says %d tokens", ErrCorrupt, sum, t)
	}
	return p, nil
}

// OpenPart maps the part file at path and parses it (NewPart); Close
// unmaps it.
func OpenPart(path string) (*Part, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	p, err := NewPart(data)
	if err != nil {
		unmap()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p.unmap = unmap
	return p, nil
}

// OpenFile maps the part file at path (the file m.File names, in the
// parts' directory or copied elsewhere) and checks it before it parses a
// byte of it: its size and SHA-256 against m.File (ErrMismatch: a
// truncated, corrupt or replaced part file). It then parses it (NewPart)
// and checks its example and token counts and its last sample against m
// (ErrMismatch). This is how a split run's commit opens a part, as
// Manifest.OpenFile is how a reader opens a shard.
func (m *PartManifest) OpenFile(path string) (*Part, error) {
	data, unmap, err := mapFile(path)
	if err != nil {
		return nil, err
	}
	p, err := func() (*Part, error) {
		if int64(len(data)) != m.File.Bytes {
			return nil, fmt.Errorf("%w: %s: %d bytes, the part manifest says %d (a truncated or replaced part file)",
				ErrMismatch, path, len(data), m.File.Bytes)
		}
		sum := sha256.Sum256(data)
		if got := hex.EncodeToString(sum[:]); got != m.File.SHA256 {
			return nil, fmt.Errorf("%w: %s: SHA-256 %s, the part manifest says %s (a corrupt or replaced part file)",
				ErrMismatch, path, got, m.File.SHA256)
		}
		p, err := NewPart(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if p.NumTokens() != m.Tokens || int64(p.NumExamples()) != m.Examples || p.LastSample() >= m.Records {
			return nil, fmt.Errorf("%w: %s: %d examples, %d tokens, up to record %d; the part manifest says %d examples, %d tokens, of %d records",
				ErrMismatch, path, p.NumExamples(), p.NumTokens(), p.LastSample(), m.Examples, m.Tokens, m.Records)
		}
		return p, nil
	}()
	if err != nil {
		_ = unmap()
		return nil, err
	}
	p.unmap = unmap
	return p, nil
}

// Close releases the mapping of a Part from OpenPart or OpenFile; the examples it
// returned are invalid afterwards.
func (p *Part) Close() error {
	if p.unmap != nil {
		return p.unmap()
	}
	return nil
}

// NumExamples returns the number of examples.
func (p *Part) NumExamples() int { return p.n }

// NumTokens returns the number of token ids of all the examples.
func (p *Part) NumTokens() int64 { return int64(len(p.tokens)) }

// LastSample returns the last example's sample index (the highest), or -1
// when there is none.
func (p *Part) LastSample() int64 {
	if p.n == 0 {
		return -1
	}
	return int64(binary.LittleEndian.Uint64(p.entries[(p.n-1)*partEntrySize:]))
}

// AppendExamples appends every example of p to dst, with base added to
// each sample index, and their flags to flags; the token slices alias p.
// A part with PartHasLoss gives every example a Loss (one new []bool for
// the whole part).
func (p *Part) AppendExamples(dst []Example, flags []uint8, base int64) ([]Example, []uint8) {
	var loss []bool
	if p.loss != nil {
		loss = make([]bool, len(p.tokens))
		for j := range loss {
			loss[j] = p.loss[j>>3]>>(j&7)&1 != 0
		}
	}
	var off uint32
	for k := range p.n {
		e := p.entries[k*partEntrySize:]
		length := binary.LittleEndian.Uint32(e[8:])
		pf := binary.LittleEndian.Uint32(e[12:])
		ex := Example{
			Sample: base + int64(binary.LittleEndian.Uint64(e)),
			Tokens: p.tokens[off : off+length : off+length],
			Prompt: int(pf & (1<<24 - 1)),
		}
		if loss != nil {
			ex.Loss = loss[off : off+length : off+length]
		}
		dst = append(dst, ex)
		flags = append(flags, uint8(pf>>24))
		off += length
	}
	return dst, flags
}

// PartOptions are the options of a split run that decide its output; every
// part of one run must have the same.
type PartOptions struct {
	Layout              // seq_len, mode, labels (the pad id is in the tokenizer)
	Template     string `json:"template"`
	TemplateText string `json:"template_text"`
	NoSpecial    bool   `json:"no_special"`
	SplitLong    bool   `json:"split_long"`
	MaxRecords   int64  `json:"max_records"`
	Seed         uint64 `json:"seed"`
	Ranks        int    `json:"ranks"`
	DropLast     bool   `json:"drop_last"`
	BatchRows    int    `json:"batch_rows"`
	OnBadRecord  string `json:"on_bad_record"`
	// Chat is a chat-format run's template SHA-256 and date (template and
	// template_text are then the chat template's name and source, and
	// labels a chat policy); nil for Alpaca records.
	Chat *ChatInfo `json:"chat,omitempty"`
}

// PartInput is one file of a split run's whole input.
type PartInput struct {
	File string `json:"file"`
	Size int64  `json:"size"`
}

// PartPiece is what a part read of one file: the byte range [Off, End)
// (the whole file when Off = 0 and End = Size), its format, and its
// records (skipped ones included) and skipped records.
type PartPiece struct {
	File    string `json:"file"`
	Size    int64  `json:"size"`
	Off     int64  `json:"off"`
	End     int64  `json:"end"`
	Format  string `json:"format"`
	Records int64  `json:"records"`
	Skipped int64  `json:"skipped"`
}

// PartFileEntry describes a part's examples file.
type PartFileEntry struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// PartManifest is part-IIIII-of-NNNNN.json, written last: its presence
// means the part is whole.
type PartManifest struct {
	Format    string        `json:"format"`
	Version   int           `json:"version"`
	Part      int           `json:"part"`
	Parts     int           `json:"parts"`
	CreatedBy string        `json:"created_by"`
	Tokenizer TokenizerInfo `json:"tokenizer"`
	Options   PartOptions   `json:"options"`
	Inputs    []PartInput   `json:"inputs"` // the whole input, every part's files
	Share     []PartPiece   `json:"share"`  // what this part read, in order
	// Records counts the share's records (skipped ones included); sample
	// indices in the file are 0..Records-1. Only records with a sample
	// below options.max_records (when set) are in the file.
	Records          int64 `json:"records"`
	RecordsSkipped   int64 `json:"records_skipped"`
	RecordsTruncated int64 `json:"records_truncated"`
	RecordsSplit     int64 `json:"records_split"`
	// RecordsDropped counts the chat conversations whose trained tokens
	// truncation cut off (they have no example; they are counted in
	// records_truncated too), and Dropped lists their record indices
	// within the part, ascending, so that a commit with max_records can
	// count those in the head.
	RecordsDropped int64         `json:"records_dropped,omitempty"`
	Dropped        []int64       `json:"dropped,omitempty"`
	Examples       int64         `json:"examples"`
	Tokens         int64         `json:"tokens"`
	InputBytes     int64         `json:"input_bytes"` // as stored
	Bytes          int64         `json:"bytes"`       // decompressed
	Seconds        float64       `json:"seconds"`
	File           PartFileEntry `json:"file"`
}

// Validate checks a part manifest's own consistency.
func (m *PartManifest) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: part manifest: %s", ErrCorrupt, fmt.Sprintf(format, args...))
	}
	switch {
	case m.Format != PartFormatName:
		return bad("format %q, want %q", m.Format, PartFormatName)
	case m.Version != PartFormatVersion:
		return bad("version %d, this reader knows %d", m.Version, PartFormatVersion)
	case m.Parts < 1 || m.Parts > MaxParts || m.Part < 0 || m.Part >= m.Parts:
		return bad("part %d of %d", m.Part, m.Parts)
	case m.File.Path != PartFileName(m.Part, m.Parts):
		return bad("file %q, want %q", m.File.Path, PartFileName(m.Part, m.Parts))
	case m.Records < 0 || m.RecordsSkipped < 0 || m.RecordsSkipped > m.Records || m.Examples < 0 || m.Tokens < 0 ||
		m.RecordsTruncated < 0 || m.RecordsSplit < 0 || m.InputBytes < 0 || m.File.Bytes < partHeaderSize:
		return bad("negative or inconsistent counts")
	case len(m.File.SHA256) != 64:
		return bad("sha256 %q", m.File.SHA256)
	}
	if int64(len(m.Dropped)) != m.RecordsDropped || m.RecordsDropped > m.RecordsTruncated {
		return bad("records_dropped %d with %d dropped records listed, %d truncated", m.RecordsDropped, len(m.Dropped), m.RecordsTruncated)
	}
	for k, s := range m.Dropped {
		if s < 0 || s >= m.Records || k > 0 && s <= m.Dropped[k-1] {
			return bad("dropped record %d: want ascending indices below %d", s, m.Records)
		}
	}
	var recs int64
	for i, p := range m.Share {
		if p.Off < 0 || p.End > p.Size || p.Off > p.End || p.Records < 0 || p.Skipped < 0 || p.Skipped > p.Records {
			return bad("share %d (%s): range [%d, %d) of %d bytes, %d records, %d skipped", i, p.File, p.Off, p.End, p.Size, p.Records, p.Skipped)
		}
		recs += p.Records
	}
	if recs != m.Records {
		return bad("the share's records add up to %d, records is %d", recs, m.Records)
	}
	if fm := (FileMeta{Rank: 0, Ranks: m.Options.Ranks, SeqLen: m.Options.SeqLen, Mode: m.Options.Mode, Labels: m.Options.Labels}); fm.validate() != nil {
		return bad("options: %v", fm.validate())
	}
	return nil
}

// EncodePartManifest returns m as indented JSON.
func EncodePartManifest(m *PartManifest) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// DecodePartManifest decodes and validates a part manifest read from r;
// name is used in errors.
func DecodePartManifest(name string, r io.Reader) (*PartManifest, error) {
	data, err := readManifestBytes(name, r)
	if err != nil {
		return nil, err
	}
	var m PartManifest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, name, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &m, nil
}
