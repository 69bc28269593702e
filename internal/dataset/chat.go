package dataset

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/ferryml/ferry/chattemplate"
	"github.com/ferryml/ferry/internal/storage"
)

// ErrChat marks a chat record of a shape ferry does not read: no message
// list, a message that is not an object, a content part that is not text
// (ferry is text-only), a malformed tools string.
var ErrChat = errors.New("dataset: bad conversation")

// Conversation is one chat record as a chat template receives it: the
// values of chattemplate, with the keys of every object in the order of
// the input.
type Conversation struct {
	// Messages are the record's messages (role/content, tool_calls, ...),
	// ShareGPT turns mapped to messages, the record's system prepended.
	// They are not yet normalised (chattemplate.Template.Apply does that,
	// as transformers does).
	Messages *chattemplate.List
	// Tools is the record's tools: a list of JSON schemas, nil when absent.
	Tools chattemplate.Value
	// Kwargs are the record's chat_template_kwargs, nil when absent.
	Kwargs map[string]chattemplate.Value
}

// ChatResult is what ReadChat found.
type ChatResult = Results[Conversation]

// ReadChat reads every conversation of loc (a path or s3:// URL), in the
// formats Read accepts (detected from the content, optionally gzip- or
// zstd-compressed). A record is one of:
//
//   - an object with "messages" (role/content messages);
//   - an object with "conversations": ShareGPT from/value turns (mapped by
//     chattemplate.ShareGPT), or role/content messages;
//   - a bare array of messages (a JSON Lines line, or a whole JSON file);
//
// and a file holding a single JSON object is one record. Optional fields
// of a record object: "tools" (a list, or a JSON string of one), "system"
// (a string: a system message put first unless the messages start with
// one) and "chat_template_kwargs" (an object). A Parquet file's rows are
// records, its columns the fields (messages as list<struct>).
//
// Message content is a string, null, or a list of parts: {"type": "text",
// "text": ...} parts are kept as they are; LLaMA-Factory's {"type",
// "value"} parts become content (text), reasoning_content (reasoning) and
// tool_calls (tool_call, a JSON string); any other part (image, audio,
// video, file) makes the record bad: ferry is text-only.
func ReadChat(ctx context.Context, loc string, opt Options) (*ChatResult, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 64 << 30
	}
	rc, size, err := storage.OpenStream(ctx, loc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	raw, err := readAll(rc, size, opt.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", loc, err)
	}
	return ParseChat(loc, raw, opt)
}

// firstChatChunk is how many bytes of its input FirstChat parses first;
// it reads four times more each time they do not hold record 0. (A
// variable: the tests grow it from one byte.)
var firstChatChunk = 64 << 10

// FirstChat reads the first record (record 0) of loc as ReadChat reads it,
// and only as much of loc as that takes: a JSON or JSON Lines input (plain
// or compressed) is read in growing prefixes, parsed as they come, until
// one holds record 0 whole, so that telling a large or remote input's
// format does not read it all. A Parquet file is read whole. The error is
// the one ReadChat reports for record 0 (a *RecordError with Index 0), or
// one about the whole input (unreadable, or no records).
func FirstChat(ctx context.Context, loc string) (Conversation, error) {
	rc, _, err := storage.OpenStream(ctx, loc)
	if err != nil {
		return Conversation{}, err
	}
	defer rc.Close()
	return firstChat(loc, rc, 64<<30)
}

// firstChat is FirstChat for the input r (name in errors) of at most limit
// bytes, decompressed.
func firstChat(name string, r io.Reader, limit int64) (Conversation, error) {
	br := bufio.NewReader(r)
	head, _ := br.Peek(4)
	in, kind, closeZ, err := decompressor(br, head, limit)
	if err != nil {
		return Conversation{}, fmt.Errorf("%s: %w", name, err)
	}
	defer closeZ()
	var buf bytes.Buffer
	for want := int64(firstChatChunk); ; want = min(want*4, limit+1) {
		ask := want - int64(buf.Len())
		n, err := buf.ReadFrom(io.LimitReader(in, ask))
		if err != nil {
			if kind != "" {
				err = fmt.Errorf("%s: %w", kind, err)
			}
			return Conversation{}, fmt.Errorf("%s: %w", name, err)
		}
		if int64(buf.Len()) > limit {
			return Conversation{}, fmt.Errorf("%s: %w: more than %d bytes", name, ErrLimit, limit)
		}
		eof := n < ask
		data := buf.Bytes()
		if !eof && len(data) >= 4 && string(data[:4]) == "PAR1" {
			continue // Parquet: read whole
		}
		if c, ok, err := firstRecord(name, data, !eof); ok || eof {
			return c, err
		}
	}
}

// firstRecord parses record 0 of data, the input whole or (prefix) its
// start; ok is false when a prefix does not hold record 0 whole.
func firstRecord(name string, data []byte, prefix bool) (c Conversation, ok bool, err error) {
	var first *RecordError
	res := &ChatResult{}
	p := newChatParser(name, res, Options{OnBad: func(e *RecordError) error {
		first = e
		return e
	}})
	p.prefix = prefix
	switch {
	case len(data) >= 4 && string(data[:4]) == "PAR1":
		err = p.parquet(data)
	default:
		err = p.json(data)
	}
	switch {
	case len(res.Records) > 0:
		return res.Records[0], true, nil
	case first != nil && first.Index == 0 && !(prefix && errors.Is(first.Err, ErrSyntax)):
		return Conversation{}, true, first
	case prefix:
		return Conversation{}, false, nil
	case err == nil:
		return Conversation{}, true, fmt.Errorf("%w: %s has no records", ErrEmpty, name)
	}
	return Conversation{}, true, err
}

// ParseChat is ReadChat for an input already in memory; name is used in
// errors.
func ParseChat(name string, raw []byte, opt Options) (*ChatResult, error) {
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = 64 << 30
	}
	data, err := decompress(raw, opt.MaxBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	res := &ChatResult{Bytes: int64(len(data)), RawBytes: int64(len(raw))}
	p := newChatParser(name, res, opt)
	if len(data) >= 4 && string(data[:4]) == "PAR1" {
		res.Format = Parquet
		err = p.parquet(data)
	} else {
		err = p.json(data)
	}
	if err != nil {
		return nil, err
	}
	if len(res.Records) == 0 && res.Skipped == 0 {
		return nil, fmt.Errorf("%w: %s has no records", ErrEmpty, name)
	}
	return res, nil
}

// newChatParser returns a parser of name's records into res that passes
// bad records to opt.OnBad (nil: the first is the error) and counts the
// skipped ones.
func newChatParser(name string, res *ChatResult, opt Options) *chatParser {
	return &chatParser{name: name, res: res, bad: res.badRecords(opt)}
}

type chatParser struct {
	name  string
	res   *ChatResult
	bad   func(*RecordError) error
	lines lineCounter
	// prefix: the data is the start of a longer input (FirstChat). An
	// input that is one JSON value so far may not be one as a whole, so a
	// record that is the whole input (one object, or one conversation's
	// message list), a last line without its newline or an array element
	// that ends the data is answered errPrefix rather than read.
	prefix bool
}

// errPrefix: the input's start does not tell how the rest is read.
var errPrefix = errors.New("dataset: more of the input is needed")

// lineCounter gives the 1-based line of byte offsets asked for in
// increasing order, counting newlines only since the last one asked
// (lineAt per record would be quadratic in the file size).
type lineCounter struct {
	off  int
	line int64
}

func (c *lineCounter) at(data []byte, off int) int64 {
	if c.line == 0 || off < c.off {
		c.off, c.line = 0, 1
	}
	c.line += int64(bytes.Count(data[c.off:off], []byte{'\n'}))
	c.off = off
	return c.line
}

// add converts record idx (v, found at byte offset off of data, -1 if
// unknown) and keeps it, or reports it bad.
func (p *chatParser) add(idx int64, v chattemplate.Value, off int64, line int64) error {
	c, field, err := conversation(v)
	if err != nil {
		return p.bad(&RecordError{File: p.name, Index: idx, Offset: off, Line: line, Field: field, Err: err})
	}
	p.res.Records = append(p.res.Records, c)
	p.res.Samples = append(p.res.Samples, idx)
	return nil
}

func (p *chatParser) json(data []byte) error {
	start := 0
	if bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		start = 3
	}
	body := data[start:]
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) == 0 {
		return fmt.Errorf("%w: %s is empty", ErrEmpty, p.name)
	}
	// A '[' that starts a line which is no JSON value by itself, or the
	// file's only line: one JSON array, of records or of the messages of
	// one conversation (array tells them apart by the first element), or
	// with an error somewhere, which array reports. A '[' line that is a
	// JSON value with more lines after it: JSON Lines of bare message
	// arrays. Neither validates or parses the whole file first: only the
	// records are parsed, once each (a detection that stops at the first
	// record reads only that one).
	//
	// A first line that is a JSON array whose first element is no message
	// is the start of an array of records whatever follows it, so that
	// the input's start decides how its first record is read (FirstChat).
	first, more, _ := bytes.Cut(trimmed, []byte("\n"))
	oneLine := len(bytes.TrimLeft(more, " \t\r\n")) == 0
	if trimmed[0] == '[' && (oneLine || !json.Valid(first) || !startsWithMessage(first)) {
		p.res.Format = JSONArray
		return p.array(data, start)
	}
	// One record object in the whole file (json.Valid stops at the end of
	// the first line of JSON Lines).
	if trimmed[0] != '[' && json.Valid(body) {
		if p.prefix {
			return errPrefix
		}
		v, err := chattemplate.ParseJSONValue(body)
		if err != nil {
			return &RecordError{File: p.name, Index: 0, Offset: int64(start), Line: 1, Err: fmt.Errorf("%w: %v", ErrSyntax, err)}
		}
		p.res.Format = JSONArray
		return p.add(0, v, int64(start), lineAt(data, start))
	}
	// JSON Lines: one record a non-blank line.
	return p.jsonLines(data, start, 0)
}

// jsonLines reads data[start:] as JSON Lines, one record a non-blank line;
// data starts at byte base of its file (errors name base + the offset, and
// no line when base > 0: the lines before were not read).
func (p *chatParser) jsonLines(data []byte, start int, base int64) error {
	p.res.Format = JSONLines
	line := func(off int) int64 {
		if base > 0 {
			return 0
		}
		return p.lines.at(data, off)
	}
	var idx int64
	for off := start; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += off
		}
		text := bytes.TrimSpace(data[off:end])
		if len(text) > 0 && p.prefix && end == len(data) {
			return errPrefix // a line the input's start may cut short
		}
		if len(text) > 0 {
			v, err := chattemplate.ParseJSONValue(text)
			if err != nil {
				if err := p.bad(&RecordError{File: p.name, Index: idx, Offset: base + int64(off), Line: line(off),
					Err: fmt.Errorf("%w: %v", ErrSyntax, err)}); err != nil {
					return err
				}
			} else if err := p.add(idx, v, base+int64(off), line(off)); err != nil {
				return err
			}
			idx++
		}
		off = end + 1
	}
	return nil
}

// ReadChatPieces reads the conversations of pieces (Share's), in order,
// as one input, as ReadPieces does for Alpaca records: samples number the
// records across the pieces from 0; a whole piece is read as ReadChat
// reads a file, a byte range as JSON Lines (Share cuts a file only
// between two lines that hold records, so each range holds whole lines
// and reads as a single run reads them).
func ReadChatPieces(ctx context.Context, pieces []Piece, opt Options) (*ChatResult, []PieceResult, error) {
	return readPieces(ctx, pieces, func(pc Piece) (*ChatResult, error) {
		if pc.Whole() {
			return ReadChat(ctx, pc.File, opt)
		}
		return readChatRange(ctx, pc, opt)
	})
}

// readChatRange reads the conversations of the byte range pc of a plain
// JSON Lines file.
func readChatRange(ctx context.Context, pc Piece, opt Options) (*ChatResult, error) {
	data, err := readPieceBytes(ctx, pc, opt, false)
	if err != nil {
		return nil, err
	}
	res := &ChatResult{Bytes: int64(len(data)), RawBytes: int64(len(data))}
	p := newChatParser(pc.File, res, opt)
	start := 0
	if pc.Off == 0 && bytes.HasPrefix(data, []byte("\xef\xbb\xbf")) {
		start = 3
	}
	if err := p.jsonLines(data, start, pc.Off); err != nil {
		return nil, err
	}
	return res, nil
}

// array reads the elements of the JSON array that starts data[start:] one
// by one, so that each record's offset is known and a syntax error names
// the record it is in. When the first element looks like a message
// (looksLikeMessage), the whole array is one conversation's messages.
func (p *chatParser) array(data []byte, start int) error {
	dec := json.NewDecoder(bytes.NewReader(data[start:]))
	dec.UseNumber()
	syntax := func(idx int64, err error) error {
		// where the failing record begins: past the separator the
		// decoder stopped after
		off := start + int(dec.InputOffset())
		for off < len(data) && bytes.IndexByte([]byte(", \t\r\n"), data[off]) >= 0 {
			off++
		}
		var se *json.SyntaxError
		if errors.As(err, &se) {
			off = start + int(se.Offset)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			err = errors.New("unexpected end of input (is the array cut short?)")
		}
		return &RecordError{File: p.name, Index: idx, Offset: int64(off), Line: p.lines.at(data, off), Err: fmt.Errorf("%w: %v", ErrSyntax, err)}
	}
	if _, err := dec.Token(); err != nil {
		return syntax(0, err)
	}
	var idx int64
	for dec.More() {
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return syntax(idx, err)
		}
		end := start + int(dec.InputOffset())
		if p.prefix && end == len(data) {
			return errPrefix // a number or literal may go on past the start
		}
		off := end - len(raw)
		v, err := chattemplate.ParseJSONValue(raw)
		if err != nil {
			return syntax(idx, err)
		}
		if idx == 0 && looksLikeMessage(v) {
			// The array is the message list of one conversation.
			if p.prefix {
				return errPrefix // which may not end where this start does
			}
			v, err := chattemplate.ParseJSONValue(data[start:])
			if err != nil {
				return &RecordError{File: p.name, Index: 0, Offset: int64(start), Line: lineAt(data, start), Err: fmt.Errorf("%w: %v", ErrSyntax, err)}
			}
			return p.add(0, v, int64(start), lineAt(data, start))
		}
		if err := p.add(idx, v, int64(off), p.lines.at(data, off)); err != nil {
			return err
		}
		idx++
	}
	if _, err := dec.Token(); err != nil {
		return syntax(idx, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return syntax(idx, errors.New("found more after the closing ']'"))
	}
	return nil
}

// startsWithMessage reports whether the JSON array line (valid JSON) is
// empty or starts with a message (looksLikeMessage): a JSON Lines line of
// bare messages.
func startsWithMessage(line []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil || !dec.More() {
		return true
	}
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return true
	}
	v, err := chattemplate.ParseJSONValue(raw)
	return err == nil && looksLikeMessage(v)
}

// looksLikeMessage reports whether the first element of a top-level JSON
// array makes it the message list of one conversation rather than an array
// of records: an object with "role" or "from" and without "messages" or
// "conversations".
func looksLikeMessage(v chattemplate.Value) bool {
	d, ok := v.(*chattemplate.Dict)
	if !ok {
		return false
	}
	_, hasMsgs := d.Get("messages")
	_, hasConv := d.Get("conversations")
	_, hasRole := d.Get("role")
	_, hasFrom := d.Get("from")
	return (hasRole || hasFrom) && !hasMsgs && !hasConv
}

// conversation converts one record. field names what is wrong
// ("messages[3].content[1]", "tools", ...) when err is not nil.
func conversation(v chattemplate.Value) (c Conversation, field string, err error) {
	bad := func(field, format string, a ...any) (Conversation, string, error) {
		return Conversation{}, field, fmt.Errorf("%w: %s: %s", ErrChat, field, fmt.Sprintf(format, a...))
	}
	var msgs *chattemplate.List
	var system chattemplate.Value
	key := "messages"
	switch r := v.(type) {
	case *chattemplate.List:
		msgs = r
	case *chattemplate.Dict:
		m, ok := r.Get("messages")
		if !ok {
			key = "conversations"
			m, ok = r.Get("conversations")
		}
		if !ok {
			return bad("messages", "the record has neither \"messages\" nor \"conversations\" (keys: %s)", keyList(r))
		}
		l, ok := m.(*chattemplate.List)
		if !ok {
			return bad(key, "is %s, want a list of messages", pyType(m))
		}
		msgs = l
		if t, ok := r.Get("tools"); ok && t != nil {
			if s, isStr := t.(string); isStr {
				t, err = chattemplate.ParseJSONValue([]byte(s))
				if err != nil {
					return bad("tools", "a JSON string that does not parse: %v", err)
				}
			}
			if _, isList := t.(*chattemplate.List); !isList && t != nil {
				return bad("tools", "is %s, want a list of tool schemas (or a JSON string of one)", pyType(t))
			}
			c.Tools = t
		}
		if k, ok := r.Get("chat_template_kwargs"); ok && k != nil {
			d, isDict := k.(*chattemplate.Dict)
			if !isDict {
				return bad("chat_template_kwargs", "is %s, want an object", pyType(k))
			}
			c.Kwargs = make(map[string]chattemplate.Value, d.Len())
			for _, kk := range d.Keys() {
				name, _ := kk.(string)
				c.Kwargs[name], _ = d.Get(kk)
			}
		}
		if s, ok := r.Get("system"); ok && s != nil {
			if _, isStr := s.(string); !isStr {
				return bad("system", "is %s, want a string", pyType(s))
			}
			system = s
		}
	default:
		return bad("record", "is %s, want an object with \"messages\" or \"conversations\", or a list of messages", pyType(v))
	}
	if len(msgs.Items) == 0 {
		return bad(key, "is empty")
	}
	if first, ok := msgs.Items[0].(*chattemplate.Dict); ok {
		if _, from := first.Get("from"); from {
			if msgs, err = shareGPT(msgs); err != nil {
				return bad(key, "%v", err)
			}
		}
	}
	out := chattemplate.NewList()
	if system != nil && system != "" && !startsWithSystem(msgs) {
		sys := chattemplate.NewDict()
		sys.Set("role", "system")
		sys.Set("content", system)
		out.Items = append(out.Items, sys)
	}
	for i, m := range msgs.Items {
		d, ok := m.(*chattemplate.Dict)
		if !ok {
			return bad(fmt.Sprintf("%s[%d]", key, i), "is %s, want an object", pyType(m))
		}
		d, field, err := message(d)
		if err != nil {
			return bad(fmt.Sprintf("%s[%d]%s", key, i, field), "%v", err)
		}
		out.Items = append(out.Items, d)
	}
	c.Messages = out
	return c, "", nil
}

// shareGPT maps ShareGPT turns with chattemplate.ShareGPT, which knows the
// roles; a turn without "from" is reported with its index.
func shareGPT(turns *chattemplate.List) (*chattemplate.List, error) {
	for i, t := range turns.Items {
		d, ok := t.(*chattemplate.Dict)
		if !ok {
			return nil, fmt.Errorf("turn %d is %s, want an object with \"from\" and \"value\"", i, pyType(t))
		}
		if _, ok := d.Get("from"); !ok {
			return nil, fmt.Errorf("turn %d has no \"from\" (keys: %s)", i, keyList(d))
		}
	}
	return chattemplate.ShareGPT(turns)
}

func startsWithSystem(msgs *chattemplate.List) bool {
	if len(msgs.Items) == 0 {
		return false
	}
	d, ok := msgs.Items[0].(*chattemplate.Dict)
	if !ok {
		return false
	}
	r, _ := d.Get("role")
	return r == "system"
}

// textParts are the content part types that carry text.
var textParts = map[string]bool{"text": true, "input_text": true, "output_text": true}

// message checks one message's content parts and maps LLaMA-Factory's
// {"type", "value"} parts; it returns d itself when nothing changes.
func message(d *chattemplate.Dict) (*chattemplate.Dict, string, error) {
	content, ok := d.Get("content")
	if !ok {
		return d, "", nil
	}
	parts, ok := content.(*chattemplate.List)
	if !ok {
		return d, "", nil
	}
	valueParts := false
	for j, p := range parts.Items {
		pd, ok := p.(*chattemplate.Dict)
		if !ok {
			return nil, fmt.Sprintf(".content[%d]", j), fmt.Errorf("is %s, want a content part object", pyType(p))
		}
		t, _ := pd.Get("type")
		ts, _ := t.(string)
		_, hasValue := pd.Get("value")
		_, hasText := pd.Get("text")
		switch {
		case hasValue && !hasText && (ts == "text" || ts == "reasoning" || ts == "tool_call"):
			valueParts = true
		case textParts[ts] || (ts == "" && hasText):
		default:
			return nil, fmt.Sprintf(".content[%d]", j), fmt.Errorf("is a %q part: ferry reads text only (no image, audio, video or file parts)", ts)
		}
	}
	if !valueParts {
		return d, "", nil
	}
	// LLaMA-Factory's layout: text parts are the content, reasoning parts
	// reasoning_content, tool_call parts (JSON strings) tool_calls.
	var text, reasoning string
	var calls []chattemplate.Value
	for j, p := range parts.Items {
		pd := p.(*chattemplate.Dict)
		t, _ := pd.Get("type")
		v, _ := pd.Get("value")
		s, ok := v.(string)
		if !ok {
			s2, ok2 := pd.Get("text")
			s, ok = s2.(string)
			if !ok || !ok2 {
				return nil, fmt.Sprintf(".content[%d]", j), fmt.Errorf("\"value\" is %s, want a string", pyType(v))
			}
		}
		switch t {
		case "reasoning":
			reasoning += s
		case "tool_call":
			call, err := chattemplate.ParseJSONValue([]byte(s))
			if err != nil {
				return nil, fmt.Sprintf(".content[%d]", j), fmt.Errorf("a tool_call part that is not JSON: %v", err)
			}
			cd, ok := call.(*chattemplate.Dict)
			if !ok {
				return nil, fmt.Sprintf(".content[%d]", j), fmt.Errorf("a tool_call part that is %s, want an object", pyType(call))
			}
			fn := chattemplate.NewDict()
			for _, k := range []string{"name", "arguments"} {
				if x, ok := cd.Get(k); ok {
					fn.Set(k, x)
				}
			}
			tc := chattemplate.NewDict()
			tc.Set("type", "function")
			tc.Set("function", fn)
			calls = append(calls, tc)
		default:
			text += s
		}
	}
	out := chattemplate.NewDict()
	for _, k := range d.Keys() {
		v, _ := d.Get(k)
		out.Set(k, v)
	}
	out.Set("content", text)
	if reasoning != "" {
		out.Set("reasoning_content", reasoning)
	}
	if len(calls) > 0 {
		out.Set("tool_calls", chattemplate.NewList(calls...))
	}
	return out, "", nil
}

func keyList(d *chattemplate.Dict) string {
	var b []byte
	for i, k := range d.Keys() {
		if i > 0 {
			b = append(b, ", "...)
		}
		b = fmt.Appendf(b, "%v", k)
		if i == 7 {
			b = append(b, ", ..."...)
			break
		}
	}
	return string(b)
}

// pyType names a value's type as Python would.
func pyType(v chattemplate.Value) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case int64, float64:
		return "a number"
	case string:
		return "a string"
	case *chattemplate.List:
		return "a list"
	case *chattemplate.Dict:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// parquet reads every row of a Parquet file as a record object (columns
// in schema order), then converts it as a JSON record.
func (p *chatParser) parquet(data []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %s: parquet: %v", ErrSyntax, p.name, r)
		}
	}()
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%w: %s: parquet: %v", ErrSyntax, p.name, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 1 << 14}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("%w: %s: parquet: %v", ErrSyntax, p.name, err)
	}
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	if err != nil {
		return fmt.Errorf("%w: %s: parquet: %v", ErrSyntax, p.name, err)
	}
	defer rr.Release()
	var row int64
	for rr.Next() {
		rec := rr.RecordBatch()
		schema := rec.Schema()
		for i := range int(rec.NumRows()) {
			d := chattemplate.NewDict()
			var cerr error
			for c := range int(rec.NumCols()) {
				v, err := arrowValue(rec.Column(c), i)
				if err != nil {
					cerr = fmt.Errorf("%w: column %q: %v", ErrChat, schema.Field(c).Name, err)
					break
				}
				d.Set(schema.Field(c).Name, v)
			}
			if cerr != nil {
				if err := p.bad(&RecordError{File: p.name, Index: row, Offset: -1, Err: cerr}); err != nil {
					return err
				}
			} else if err := p.add(row, d, -1, 0); err != nil {
				return err
			}
			row++
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: %s: parquet: %v", ErrSyntax, p.name, err)
	}
	return nil
}

// arrowValue is element i of a as a template value, as pyarrow's
// to_pylist (and so the datasets library) gives it: structs are objects
// with every field (a missing key is null), lists are lists.
func arrowValue(a arrow.Array, i int) (chattemplate.Value, error) {
	if a.IsNull(i) {
		return nil, nil
	}
	switch a := a.(type) {
	case *array.String:
		return validString(a.Value(i))
	case *array.LargeString:
		return validString(a.Value(i))
	case *array.StringView:
		return validString(a.Value(i))
	case *array.Boolean:
		return a.Value(i), nil
	case *array.Int8:
		return int64(a.Value(i)), nil
	case *array.Int16:
		return int64(a.Value(i)), nil
	case *array.Int32:
		return int64(a.Value(i)), nil
	case *array.Int64:
		return a.Value(i), nil
	case *array.Uint8:
		return int64(a.Value(i)), nil
	case *array.Uint16:
		return int64(a.Value(i)), nil
	case *array.Uint32:
		return int64(a.Value(i)), nil
	case *array.Float32:
		return float64(a.Value(i)), nil
	case *array.Float64:
		return a.Value(i), nil
	case *array.Null:
		return nil, nil
	case array.ListLike:
		start, end := a.ValueOffsets(i)
		vals := a.ListValues()
		if _, isMap := a.(*array.Map); isMap {
			m := a.(*array.Map)
			d := chattemplate.NewDict()
			for j := start; j < end; j++ {
				k, err := arrowValue(m.Keys(), int(j))
				if err != nil {
					return nil, err
				}
				v, err := arrowValue(m.Items(), int(j))
				if err != nil {
					return nil, err
				}
				d.Set(k, v)
			}
			return d, nil
		}
		l := chattemplate.NewList()
		for j := start; j < end; j++ {
			v, err := arrowValue(vals, int(j))
			if err != nil {
				return nil, err
			}
			l.Items = append(l.Items, v)
		}
		return l, nil
	case *array.Struct:
		st := a.DataType().(*arrow.StructType)
		d := chattemplate.NewDict()
		for f := range st.NumFields() {
			v, err := arrowValue(a.Field(f), i)
			if err != nil {
				return nil, err
			}
			d.Set(st.Field(f).Name, v)
		}
		return d, nil
	}
	return nil, fmt.Errorf("values of type %s are not read (strings, numbers, booleans, lists and structs are)", a.DataType())
}

func validString(s string) (chattemplate.Value, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("%w: a string that is not valid UTF-8", ErrUTF8)
	}
	return string([]byte(s)), nil // detach from the Arrow buffers
}
