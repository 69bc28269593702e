package encode

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/ferryml/ferry/chattemplate"
	"github.com/ferryml/ferry/internal/dataset"
	"github.com/ferryml/ferry/shard"
	"github.com/ferryml/ferry/tokenize"
)

// Chat errors, matched with errors.Is.
var (
	// ErrChatRecord marks a conversation that cannot be trained on (no
	// assistant message, an unknown role, an empty assistant message, the
	// template's raise_exception): a bad record, skipped and counted with
	// --on-bad-record skip.
	ErrChatRecord = errors.New("bad conversation")
	// ErrTemplate marks a chat template whose labels would be wrong (an
	// end-of-turn token left untrained, an all-zero or all-one mask): the
	// run is refused, naming the template and the first conversation.
	ErrTemplate = errors.New("chat template refused")
)

// Roles a training conversation may use; any other is a bad record.
var chatRoles = map[string]bool{"system": true, "developer": true, "user": true, "assistant": true,
	"tool": true, "ipython": true, "function": true}

// sentinel replaces an assistant message's content to find where the
// template writes it (a noncharacter no text carries; see assistantRegion).
const sentinel = "\U0010FFFF"

// ChatConfig configures a ChatEncoder.
type ChatConfig struct {
	Template *chattemplate.Template // required
	Special  map[string]string      // the template's special-token variables
	// Now is strftime_now's clock; required (pinned by the caller so that
	// every conversation of a run renders with the same date).
	Now func() time.Time
	// Labels is the chat labels policy (shard.LabelsAssistant, ...).
	Labels shard.Labels
	// MaxLen is the most ids of an example (required); longer
	// conversations keep their start (or are split with SplitLong).
	MaxLen    int
	SplitLong bool
	// SpecialIDs are the tokenizer's added special tokens (AddedSpecialIDs).
	SpecialIDs map[int32]bool
}

// ChatStats counts what EncodeChats did.
type ChatStats struct {
	Truncated int64 // conversations cut to MaxLen
	Split     int64 // conversations split into several examples
	Dropped   int64 // conversations whose trained tokens were all cut off
	Skipped   int64 // bad conversations skipped (onBad returned nil)
	// DroppedSamples are the samples of the dropped conversations, in
	// input order.
	DroppedSamples []int64
}

// ChatEncoder renders conversations with a chat template, tokenizes them
// and computes their loss flags. It is safe for concurrent use.
type ChatEncoder struct {
	tok    *tokenize.Tokenizer
	c      ChatConfig
	pieces [][]byte // each id's text as it stands in the input (aligned by alignTokens)
	opts   *chattemplate.Options
}

// NewChat returns a ChatEncoder for tok.
func NewChat(tok *tokenize.Tokenizer, c ChatConfig) (*ChatEncoder, error) {
	switch {
	case c.Template == nil || c.Now == nil:
		return nil, fmt.Errorf("%w: chat encoder needs a template and a clock", ErrConfig)
	case c.MaxLen <= 0:
		return nil, fmt.Errorf("%w: chat encoder needs a max length", ErrConfig)
	case !c.Labels.IsChat():
		return nil, fmt.Errorf("%w: labels %q is not a chat policy", ErrConfig, c.Labels)
	}
	if c.Labels == shard.LabelsGeneration && !c.Template.HasGeneration() {
		return nil, fmt.Errorf("%w: --labels generation: the template %s has no {%% generation %%} block, so every mask would be all zeros "+
			"(use --labels assistant, or a template with generation blocks such as TRL's *_training.jinja via --chat-template)",
			ErrTemplate, c.Template.Name())
	}
	e := &ChatEncoder{tok: tok, c: c, opts: &chattemplate.Options{Now: c.Now}}
	e.pieces = tokenPieces(tok, c.SpecialIDs)
	return e, nil
}

// TemplateSHA256 returns the SHA-256 of a template's text, in hex.
func TemplateSHA256(text string) string {
	h := sha256.Sum256([]byte(text))
	return hex.EncodeToString(h[:])
}

// tokenPieces returns every id's bytes in the text it was encoded from:
// byte-level tokens mapped back to bytes, SentencePiece-style tokens with ▁
// as a space and <0xNN> as the byte, added tokens as their content.
func tokenPieces(tok *tokenize.Tokenizer, special map[int32]bool) [][]byte {
	_, charLevel := tok.TokenID("<0x0A>")
	inv := byteLevelInverse()
	n := tok.VocabSize()
	out := make([][]byte, n)
	for id := range int32(n) {
		s, ok := tok.Token(id)
		if !ok {
			continue
		}
		if special[id] && !charLevel {
			out[id] = []byte(s)
			continue
		}
		if charLevel {
			if len(s) == 6 && strings.HasPrefix(s, "<0x") && s[5] == '>' {
				var b [1]byte
				if _, err := hex.Decode(b[:], []byte(s[3:5])); err == nil {
					out[id] = b[:]
					continue
				}
			}
			out[id] = []byte(strings.ReplaceAll(s, "▁", " "))
			continue
		}
		var b []byte
		for _, r := range s {
			if c, ok := inv[r]; ok {
				b = append(b, c)
			} else {
				b = utf8.AppendRune(b, r)
			}
		}
		out[id] = b
	}
	return out
}

// byteLevelInverse is GPT-2's bytes_to_unicode, inverted.
func byteLevelInverse() map[rune]byte {
	m := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			m[rune(b)] = byte(b)
		} else {
			m[rune(256+n)] = byte(b)
			n++
		}
	}
	return m
}

// alignTokens returns each token's byte span [start, end) in text. A
// token's leading space that the text does not have (SentencePiece's
// prepended ▁) takes no bytes. It fails when the tokens do not spell the
// text (a normalizer changed it).
func (e *ChatEncoder) alignTokens(text string, ids []int32, starts, ends []int32) ([]int32, []int32, error) {
	starts, ends = starts[:0], ends[:0]
	match := func(rest string, p []byte) (int, bool) {
		switch {
		case strings.HasPrefix(rest, string(p)):
			return len(p), true
		case len(p) > 0 && p[0] == ' ' && strings.HasPrefix(rest, string(p[1:])):
			return len(p) - 1, true
		}
		return 0, false
	}
	c := 0
	for k, id := range ids {
		var p []byte
		if int(id) < len(e.pieces) {
			p = e.pieces[id]
		}
		n, ok := match(text[c:], p)
		if !ok {
			// whitespace an added token's lstrip/rstrip absorbed: it goes
			// to the token before
			j := c
			for j < len(text) && (text[j] == ' ' || text[j] == '\n' || text[j] == '\t' || text[j] == '\r') {
				j++
			}
			if n, ok = match(text[j:], p); ok && j > c {
				if k > 0 {
					ends[k-1] = int32(j)
				}
				c = j
			}
		}
		if !ok {
			rest := text[c:]
			return nil, nil, fmt.Errorf("token %d (id %d, %q) does not match the text at byte %d (%q): the tokenizer's normalizer changed the text",
				k, id, p, c, rest[:min(len(rest), 16)])
		}
		starts = append(starts, int32(c))
		c += n
		ends = append(ends, int32(c))
	}
	if c != len(text) {
		return nil, nil, fmt.Errorf("the tokens spell %d of the text's %d bytes", c, len(text))
	}
	return starts, ends, nil
}

// AddedSpecialIDs reads the added tokens marked special from a
// tokenizer.json (path as tokenize.Load takes it: the file, its .zst, or a
// directory holding either).
func AddedSpecialIDs(path string) (map[int32]bool, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		p := filepath.Join(path, "tokenizer.json")
		if _, err := os.Stat(p); err != nil {
			p += ".zst"
		}
		path = p
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if bytes.HasPrefix(data, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		d, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(tokenize.MaxFileSize))
		if err != nil {
			return nil, err
		}
		defer d.Close()
		if data, err = d.DecodeAll(data, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	var tj struct {
		Added []struct {
			ID      int32  `json:"id"`
			Content string `json:"content"`
			Special bool   `json:"special"`
		} `json:"added_tokens"`
	}
	if err := json.Unmarshal(data, &tj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := map[int32]bool{}
	for _, a := range tj.Added {
		if a.Special {
			out[a.ID] = true
		}
	}
	return out, nil
}

// EncodeChats renders, tokenizes, labels and fits every conversation on
// workers goroutines and returns the examples in input order. samples[i]
// is the record index of convs[i] (Example.Sample); files[i] and locals[i]
// are its file and its index there (for errors). A bad
// conversation (ErrChatRecord, as a *dataset.RecordError) is passed to
// onBad: a nil return skips it (counted), an error stops the run. A
// refused template (ErrTemplate) always stops it, naming the first
// conversation in input order where it shows. Each convs[i] is cleared
// once it is encoded (the parsed conversations are a run's largest
// structure; the examples take their place). flags[k] is example k's
// FlagTruncated and FlagSplit (on the first piece of a split
// conversation), as EncodeRecordsFlags gives them.
func (e *ChatEncoder) EncodeChats(ctx context.Context, convs []dataset.Conversation, samples []int64, files []string, locals []int64,
	workers int, onBad func(*dataset.RecordError) error, progress func(n int)) (_ []shard.Example, flags []uint8, _ ChatStats, _ error) {
	const chunk = 64
	nchunks := (len(convs) + chunk - 1) / chunk
	out := make([][]shard.Example, nchunks)
	outFlags := make([][]uint8, nchunks)
	fls := make([]uint8, len(convs))
	errs := make([]error, len(convs))
	err := Parallel(ctx, len(convs), workers, chunk, func(lo, hi int) error {
		var exs []shard.Example
		var exFlags []uint8
		for i := lo; i < hi; i++ {
			pieces, fl, err := e.encodeOne(&convs[i])
			convs[i] = dataset.Conversation{} // done with: free it while the rest encode
			if err != nil {
				errs[i] = err
				continue
			}
			fls[i] = fl
			if fl&flagDropped != 0 {
				continue
			}
			for k := range pieces {
				pieces[k].Sample = samples[i]
				if k == 0 {
					exFlags = append(exFlags, fl)
				} else {
					exFlags = append(exFlags, 0)
				}
			}
			exs = append(exs, pieces...)
		}
		out[lo/chunk], outFlags[lo/chunk] = exs, exFlags
		if progress != nil {
			progress(hi - lo)
		}
		return nil
	})
	if err != nil {
		return nil, nil, ChatStats{}, err
	}
	var stats ChatStats
	for i, fl := range fls {
		if fl&FlagTruncated != 0 {
			stats.Truncated++
		}
		if fl&FlagSplit != 0 {
			stats.Split++
		}
		if fl&flagDropped != 0 {
			stats.Dropped++
			stats.DroppedSamples = append(stats.DroppedSamples, samples[i])
		}
	}
	for i, err := range errs {
		if err == nil {
			continue
		}
		if errors.Is(err, ErrTemplate) {
			return nil, nil, ChatStats{}, fmt.Errorf("%s: record %d: %w", files[i], locals[i], err)
		}
	}
	for i, err := range errs {
		if err == nil {
			continue
		}
		re := &dataset.RecordError{File: files[i], Index: locals[i], Offset: -1, Err: err}
		if onBad == nil {
			return nil, nil, ChatStats{}, re
		}
		if err := onBad(re); err != nil {
			return nil, nil, ChatStats{}, err
		}
		stats.Skipped++
	}
	var exs []shard.Example
	for i, ch := range out {
		exs = append(exs, ch...)
		flags = append(flags, outFlags[i]...)
	}
	return exs, flags, stats, nil
}

const flagDropped uint8 = 1 << 7

// Encoded is one conversation as EncodeChat returns it, for inspection and
// tests.
type Encoded struct {
	Text string
	IDs  []int32
	Loss []bool // nil under --labels all
}

// EncodeChat renders and labels one conversation without fitting it into
// MaxLen.
func (e *ChatEncoder) EncodeChat(conv *dataset.Conversation) (*Encoded, error) {
	return e.label(conv)
}

func (e *ChatEncoder) encodeOne(conv *dataset.Conversation) ([]shard.Example, uint8, error) {
	enc, err := e.label(conv)
	if err != nil {
		return nil, 0, err
	}
	ids, loss := enc.IDs, enc.Loss
	L := e.c.MaxLen
	if len(ids) <= L {
		return []shard.Example{{Tokens: ids, Loss: loss}}, 0, nil
	}
	if e.c.SplitLong {
		// pieces of at most L ids, cut after a turn's last trained token
		// (its end of turn) where one falls in the piece, else at L
		var exs []shard.Example
		for k := 0; k < len(ids); {
			end := min(k+L, len(ids))
			if end < len(ids) && loss != nil {
				for j := end; j > k+1; j-- {
					if loss[j-1] && !loss[j] {
						end = j
						break
					}
				}
			}
			ex := shard.Example{Tokens: ids[k:end:end]}
			if loss != nil {
				ex.Loss = loss[k:end:end]
			}
			exs = append(exs, ex)
			k = end
		}
		return exs, FlagSplit, nil
	}
	ids, fl := ids[:L:L], FlagTruncated
	if loss != nil {
		loss = loss[:L:L]
		trained := false
		for _, b := range loss[1:] {
			trained = trained || b
		}
		if !trained {
			return nil, fl | flagDropped, nil
		}
	}
	return []shard.Example{{Tokens: ids, Loss: loss}}, fl, nil
}

// checkConversation refuses what cannot be trained: an unknown role, no
// assistant message, an empty assistant message.
func checkConversation(msgs *chattemplate.List) error {
	assistants := 0
	for i, m := range msgs.Items {
		d, ok := m.(*chattemplate.Dict)
		if !ok {
			return fmt.Errorf("%w: messages[%d] is not an object", ErrChatRecord, i)
		}
		r, _ := d.Get("role")
		role, _ := r.(string)
		if !chatRoles[role] {
			return fmt.Errorf("%w: messages[%d]: unknown role %q (want system, developer, user, assistant, tool, ipython or function)",
				ErrChatRecord, i, fmt.Sprint(r))
		}
		if role != "assistant" {
			continue
		}
		assistants++
		if messageEmpty(d) {
			return fmt.Errorf("%w: messages[%d]: an empty assistant message (no content, no tool calls)", ErrChatRecord, i)
		}
	}
	if assistants == 0 {
		return fmt.Errorf("%w: messages: no assistant message (nothing to train on; %d messages)", ErrChatRecord, len(msgs.Items))
	}
	return nil
}

func messageEmpty(d *chattemplate.Dict) bool {
	if tc, ok := d.Get("tool_calls"); ok {
		if l, ok := tc.(*chattemplate.List); ok && len(l.Items) > 0 {
			return false
		}
	}
	c, _ := d.Get("content")
	switch c := c.(type) {
	case string:
		return strings.TrimSpace(c) == ""
	case *chattemplate.List:
		for _, p := range c.Items {
			if pd, ok := p.(*chattemplate.Dict); ok {
				if t, _ := pd.Get("text"); t != nil {
					if s, _ := t.(string); strings.TrimSpace(s) != "" {
						return false
					}
				}
			}
		}
		return true
	}
	return true
}

func (e *ChatEncoder) apply(msgs *chattemplate.List, conv *dataset.Conversation) (chattemplate.Result, error) {
	return e.c.Template.Apply(chattemplate.Chat{Messages: msgs, Tools: conv.Tools, Kwargs: conv.Kwargs}, e.c.Special, e.opts)
}

// label renders conv, tokenizes it and computes its loss flags.
func (e *ChatEncoder) label(conv *dataset.Conversation) (*Encoded, error) {
	if err := checkConversation(conv.Messages); err != nil {
		return nil, err
	}
	res, err := e.apply(conv.Messages, conv)
	if err != nil {
		return nil, e.renderError(conv, err)
	}
	text := res.Text
	ids := e.tok.Encode(text, false)
	enc := &Encoded{Text: text, IDs: ids}
	if e.c.Labels == shard.LabelsAll {
		return enc, nil
	}
	starts, ends, err := e.alignTokens(text, ids, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrChatRecord, err)
	}
	loss := make([]bool, len(ids))
	switch e.c.Labels {
	case shard.LabelsGeneration:
		generationMask(text, res.Generation, starts, ends, loss)
		if err := e.checkGeneration(ids, loss); err != nil {
			return nil, err
		}
	default:
		var which []int
		for i, m := range conv.Messages.Items {
			r, _ := m.(*chattemplate.Dict).Get("role")
			if r == "assistant" {
				which = append(which, i)
			}
		}
		if e.c.Labels == shard.LabelsLastAssistant {
			which = which[len(which)-1:]
		}
		for _, i := range which {
			a, b, err := e.assistantRegion(conv, i, text)
			if err != nil {
				return nil, err
			}
			first := -1
			for k := range ids {
				if ends[k] > int32(a) {
					first = k
					break
				}
			}
			eot := -1
			for k := max(first, 0); k < len(ids); k++ {
				// the first special token not wholly inside the region (a
				// region's end can fall inside the token that ends it: the
				// sentinel render's end-of-turn may share its last bytes)
				if ends[k] > int32(b) && e.c.SpecialIDs[ids[k]] {
					eot = k
					break
				}
			}
			if first < 0 || eot < 0 {
				return nil, fmt.Errorf("%w: %s writes no added special token (end of turn) after assistant messages[%d]: its end-of-turn would go untrained",
					ErrTemplate, e.c.Template.Name(), i)
			}
			for k := first; k <= eot; k++ {
				loss[k] = true
			}
		}
	}
	zero, one := true, true
	for _, b := range loss {
		zero = zero && !b
		one = one && b
	}
	if zero || one {
		what := "all-zero"
		if one {
			what = "all-one"
		}
		return nil, fmt.Errorf("%w: %s gives an %s mask under --labels %s", ErrTemplate, e.c.Template.Name(), what, e.c.Labels)
	}
	enc.Loss = loss
	return enc, nil
}

// generationMask marks the tokens of each {% generation %} span exactly
// as transformers' return_assistant_tokens_mask does: from the token of
// the span's first character to the token of its last; a span whose first
// character has no token ends the marking; one whose last character has
// none runs to the end.
func generationMask(text string, spans []chattemplate.Span, starts, ends []int32, loss []bool) {
	tokenAt := func(b int) int {
		for k := range starts {
			if starts[k] <= int32(b) && int32(b) < ends[k] {
				return k
			}
			if starts[k] > int32(b) {
				break
			}
		}
		return -1
	}
	for _, sp := range spans {
		s := tokenAt(sp.Start)
		if s < 0 {
			break
		}
		// the token of the span's last character (its first byte); none,
		// or token 0 (falsy in Python), runs to the end
		last := sp.End - 1
		for last > sp.Start && !utf8.RuneStart(text[last]) {
			last--
		}
		end := tokenAt(last)
		hi := len(loss) - 1
		if end > 0 {
			hi = end
		}
		for k := s; k <= hi; k++ {
			loss[k] = true
		}
	}
}

// checkGeneration refuses a template whose generation spans leave the
// end-of-turn untrained: the last trained token of each span, whitespace
// aside, must be an added special token (TRL's stop-token check).
func (e *ChatEncoder) checkGeneration(ids []int32, loss []bool) error {
	for k := 0; k < len(loss); k++ {
		if !loss[k] || (k+1 < len(loss) && loss[k+1]) {
			continue
		}
		// k ends a run of trained tokens: find its last non-space token
		j := k
		for j >= 0 && loss[j] && strings.TrimSpace(string(e.pieces[ids[j]])) == "" {
			j--
		}
		if j >= 0 && loss[j] && !e.c.SpecialIDs[ids[j]] {
			return fmt.Errorf("%w: %s: a {%% generation %%} span ends at token %d (%q), not at an end-of-turn token: the model would not learn to stop",
				ErrTemplate, e.c.Template.Name(), j, e.pieces[ids[j]])
		}
	}
	return nil
}

// assistantRegion returns the bytes [a, b) of text that assistant message
// i's content, reasoning and tool calls make, as the template wrote them:
// the conversation is rendered again with that message's content replaced
// by a sentinel and its tool calls and reasoning removed, and the region is
// what differs between the two renders (common prefix and suffix removed).
func (e *ChatEncoder) assistantRegion(conv *dataset.Conversation, i int, text string) (int, int, error) {
	msgs := chattemplate.NewList(slices.Clone(conv.Messages.Items)...)
	src := conv.Messages.Items[i].(*chattemplate.Dict)
	d := chattemplate.NewDict()
	for _, k := range src.Keys() {
		switch k {
		case "tool_calls", "reasoning_content", "thinking", "reasoning":
			continue
		}
		v, _ := src.Get(k)
		d.Set(k, v)
	}
	d.Set("content", sentinel)
	msgs.Items[i] = d
	res, err := e.apply(msgs, conv)
	if tc, ok := src.Get("tool_calls"); ok && err != nil {
		// the template needs the tool calls (a tool message must follow
		// one): keep them, their names sentinels and arguments empty
		d.Set("tool_calls", sentinelCalls(tc))
		res, err = e.apply(msgs, conv)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("%w: %s: rendering with assistant messages[%d] replaced (to find its content) failed: %v",
			ErrTemplate, e.c.Template.Name(), i, err)
	}
	s := res.Text
	p := 0
	for p < len(text) && p < len(s) && text[p] == s[p] {
		p++
	}
	// back to a character boundary
	for p > 0 && p < len(text) && !utf8.RuneStart(text[p]) {
		p--
	}
	q := 0
	for q < len(text)-p && q < len(s)-p && text[len(text)-1-q] == s[len(s)-1-q] {
		q++
	}
	if !strings.Contains(s[p:len(s)-q], sentinel) || p >= len(text)-q {
		return 0, 0, fmt.Errorf("%w: messages[%d]: the template %s writes nothing for this assistant message (e.g. tool calls it does not render)",
			ErrChatRecord, i, e.c.Template.Name())
	}
	return p, len(text) - q, nil
}

// sentinelCalls returns tool calls like tc with each function's name
// the sentinel and its arguments empty ({} or "{}", as given).
func sentinelCalls(tc chattemplate.Value) chattemplate.Value {
	l, ok := tc.(*chattemplate.List)
	if !ok {
		return tc
	}
	out := chattemplate.NewList()
	for _, c := range l.Items {
		cd, ok := c.(*chattemplate.Dict)
		if !ok {
			out.Items = append(out.Items, c)
			continue
		}
		cd = cd.Copy()
		target := cd
		if fn, ok := cd.Get("function"); ok {
			if fd, ok := fn.(*chattemplate.Dict); ok {
				target = fd.Copy()
				cd.Set("function", target)
			}
		}
		target.Set("name", sentinel)
		if a, ok := target.Get("arguments"); ok {
			if _, isStr := a.(string); isStr {
				target.Set("arguments", "{}")
			} else {
				target.Set("arguments", chattemplate.NewDict())
			}
		}
		out.Items = append(out.Items, cd)
	}
	return out
}

// renderError words a template failure on a conversation: for the
// template's raise_exception, its message and the first message whose
// conversation prefix raises it.
func (e *ChatEncoder) renderError(conv *dataset.Conversation, err error) error {
	if !errors.Is(err, chattemplate.ErrRaised) {
		return fmt.Errorf("%w: %v", ErrChatRecord, err)
	}
	msg := err.Error()
	var te *chattemplate.Error
	if errors.As(err, &te) {
		msg = te.Msg
	}
	at := -1
	for k := 1; k <= len(conv.Messages.Items); k++ {
		if _, perr := e.apply(chattemplate.NewList(slices.Clone(conv.Messages.Items[:k])...), conv); perr != nil && errors.Is(perr, chattemplate.ErrRaised) {
			at = k - 1
			break
		}
	}
	if at >= 0 {
		return fmt.Errorf("%w: messages[%d]: the template %s raised: %s", ErrChatRecord, at, e.c.Template.Name(), msg)
	}
	return fmt.Errorf("%w: messages: the template %s raised: %s", ErrChatRecord, e.c.Template.Name(), msg)
}
