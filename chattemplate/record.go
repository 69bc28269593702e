package chattemplate

import (
	"errors"
	"fmt"
)

// ErrNotText is returned by ChatFromRecord for a content part that is not
// text (an image, audio or video): ferry is text-only.
var ErrNotText = errors.New("chattemplate: content part is not text")

var mediaParts = map[string]bool{"image": true, "image_url": true, "input_image": true, "audio": true,
	"input_audio": true, "audio_url": true, "video": true, "video_url": true, "file": true}

// ChatFromRecord reads one conversation record, as dataprep's chat input
// accepts them: an object with "messages" (a list of message objects) or
// with ShareGPT "conversations" (from/value turns, mapped by ShareGPT), or
// a bare list of messages. An object may carry "tools" (a list, or a
// string holding a JSON list, as TRL accepts) and "chat_template_kwargs"
// (an object, merged into Kwargs). Content given as a list of parts is
// kept as it is (templates read the parts); a part whose "type" is
// media (image, audio, video, ...) is an ErrNotText error. The messages
// are not normalized here: Apply does that.
func ChatFromRecord(rec Value) (Chat, error) {
	var c Chat
	var msgs Value
	switch r := rec.(type) {
	case *List:
		msgs = r
	case *Dict:
		if m, ok := r.Get("messages"); ok {
			msgs = m
		} else if conv, ok := r.Get("conversations"); ok {
			l, ok := conv.(*List)
			if !ok {
				return c, fmt.Errorf("chattemplate: \"conversations\" is a %s, want a list", pyTypeName(conv))
			}
			m, err := ShareGPT(l)
			if err != nil {
				return c, err
			}
			msgs = m
		} else {
			return c, errors.New("chattemplate: record has neither \"messages\" nor \"conversations\"")
		}
		if t, ok := r.Get("tools"); ok && t != nil {
			if s, isStr := t.(string); isStr {
				v, err := ParseJSONValue([]byte(s))
				if err != nil {
					return c, fmt.Errorf("chattemplate: \"tools\" string: %w", err)
				}
				t = v
			}
			l, ok := t.(*List)
			if !ok {
				return c, fmt.Errorf("chattemplate: \"tools\" is a %s, want a list", pyTypeName(t))
			}
			for i, tool := range l.Items {
				if _, ok := tool.(*Dict); !ok {
					return c, fmt.Errorf("chattemplate: tool %d is a %s: tools should be JSON schemas (objects)", i, pyTypeName(tool))
				}
			}
			c.Tools = l
		}
		if kw, ok := r.Get("chat_template_kwargs"); ok && kw != nil {
			d, ok := kw.(*Dict)
			if !ok {
				return c, fmt.Errorf("chattemplate: \"chat_template_kwargs\" is a %s, want an object", pyTypeName(kw))
			}
			c.Kwargs = make(map[string]Value, d.Len())
			for i, k := range d.keys {
				ks, ok := k.(string)
				if !ok {
					return c, errors.New("chattemplate: \"chat_template_kwargs\" keys must be strings")
				}
				c.Kwargs[ks] = d.vals[i]
			}
		}
	default:
		return c, fmt.Errorf("chattemplate: record is a %s, want an object or a list of messages", pyTypeName(rec))
	}
	l, ok := msgs.(*List)
	if !ok {
		return c, fmt.Errorf("chattemplate: \"messages\" is a %s, want a list", pyTypeName(msgs))
	}
	for i, m := range l.Items {
		d, ok := m.(*Dict)
		if !ok {
			return c, fmt.Errorf("chattemplate: message %d is a %s, want an object", i, pyTypeName(m))
		}
		content, _ := d.Get("content")
		parts, ok := content.(*List)
		if !ok {
			continue
		}
		for j, p := range parts.Items {
			pd, ok := p.(*Dict)
			if !ok {
				continue
			}
			typ, _ := pd.Get("type")
			if ts, _ := typ.(string); mediaParts[ts] {
				return c, fmt.Errorf("%w: message %d part %d has type %q", ErrNotText, i, j, ts)
			}
		}
	}
	c.Messages = l
	return c, nil
}
