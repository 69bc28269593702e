package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Chat is the input of one apply_chat_template call.
type Chat struct {
	Messages            *List // of *Dict
	Tools               Value // nil (None) or a *List of JSON schemas
	Documents           Value // nil (None) or a *List of *Dict
	AddGenerationPrompt bool
	// Kwargs are extra template variables (enable_thinking, date_string,
	// ...); they override special tokens of the same name.
	Kwargs map[string]Value
	// Unnormalized passes Messages to the template as they are, as
	// transformers 4.x does (4.57 neither drops null-valued keys nor
	// aliases reasoning fields); the default is transformers 5's
	// NormalizeMessages.
	Unnormalized bool
}

// reasoningFields are the names a message's reasoning is passed under;
// transformers copies the first non-null one to "thinking" and
// "reasoning_content".
var reasoningFields = []string{"reasoning_content", "thinking", "reasoning"}

// NormalizeMessages returns messages as transformers 5's
// apply_chat_template hands them to the template: in each message, keys
// whose value is None are dropped (_normalize_chat_messages), and the
// first non-None of reasoning_content, thinking, reasoning is copied to
// "thinking" (first place, unless already present) and
// "reasoning_content" (_alias_reasoning_fields). The input is not
// modified. It fails if a message is not a dict or the list is empty.
func NormalizeMessages(messages *List) (*List, error) {
	if messages == nil || len(messages.Items) == 0 {
		//lint:ignore ST1005 transformers' own message, matched by the goldens
		return nil, errors.New("chattemplate: Cannot apply chat template to an empty conversation. Provide at least one message.")
	}
	out := &List{Items: make([]Value, len(messages.Items))}
	for i, m := range messages.Items {
		d, ok := m.(*Dict)
		if !ok {
			return nil, fmt.Errorf("chattemplate: message %d is a %s, want a dict", i, pyTypeName(m))
		}
		n := NewDict()
		for j, k := range d.keys {
			if d.vals[j] != nil {
				n.Set(k, d.vals[j])
			}
		}
		var reasoning Value
		for _, f := range reasoningFields {
			if v, ok := n.Get(f); ok && v != nil {
				reasoning = v
				break
			}
		}
		if reasoning != nil {
			a := NewDict()
			a.Set("thinking", reasoning)
			for j, k := range n.keys {
				a.Set(k, n.vals[j])
			}
			a.Set("reasoning_content", reasoning)
			n = a
		}
		out.Items[i] = n
	}
	return out, nil
}

// Vars returns the template variables apply_chat_template renders with:
// the special tokens, then Kwargs, then messages (normalized), tools,
// documents and add_generation_prompt.
func (c Chat) Vars(special map[string]string) (map[string]Value, error) {
	var msgs *List
	if c.Unnormalized {
		if c.Messages == nil || len(c.Messages.Items) == 0 {
			//lint:ignore ST1005 transformers' own message, matched by the goldens
			return nil, errors.New("chattemplate: Cannot apply chat template to an empty conversation. Provide at least one message.")
		}
		msgs = c.Messages
	} else {
		var err error
		if msgs, err = NormalizeMessages(c.Messages); err != nil {
			return nil, err
		}
	}
	// render_jinja_template's checks.
	if l, ok := c.Tools.(*List); ok {
		for _, t := range l.Items {
			if _, ok := t.(*Dict); !ok {
				//lint:ignore ST1005 transformers' own message, matched by the goldens
				return nil, errors.New("chattemplate: Tools should either be a JSON schema, or a callable function with type hints and a docstring suitable for auto-conversion to a schema.")
			}
		}
	}
	if l, ok := c.Documents.(*List); ok {
		for _, d := range l.Items {
			if _, ok := d.(*Dict); !ok {
				//lint:ignore ST1005 transformers' own message, matched by the goldens
				return nil, errors.New("chattemplate: Documents should be a list of dicts with 'title' and 'text' keys!")
			}
		}
	}
	vars := make(map[string]Value, len(special)+len(c.Kwargs)+4)
	for k, v := range special {
		vars[k] = v
	}
	for k, v := range c.Kwargs {
		vars[k] = v
	}
	vars["messages"] = msgs
	vars["tools"] = c.Tools
	vars["documents"] = c.Documents
	vars["add_generation_prompt"] = c.AddGenerationPrompt
	return vars, nil
}

// Apply renders c with the template and special tokens, as
// apply_chat_template(tokenize=False) does.
func (t *Template) Apply(c Chat, special map[string]string, opts *Options) (Result, error) {
	vars, err := c.Vars(special)
	if err != nil {
		return Result{}, err
	}
	return t.Render(vars, opts)
}

// ShareGPT converts ShareGPT turns ({"from", "value"}) to messages:
// human→user, gpt→assistant, system→system, observation→tool, and
// function_call→an assistant message with content "" and one tool call
// whose function is the JSON object in value ({"name", "arguments"}).
func ShareGPT(turns *List) (*List, error) {
	roles := map[string]string{"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
		"system": "system", "observation": "tool", "tool": "tool", "function_call": "assistant"}
	out := &List{}
	for i, t := range turns.Items {
		d, ok := t.(*Dict)
		if !ok {
			return nil, fmt.Errorf("chattemplate: sharegpt turn %d is a %s, want an object", i, pyTypeName(t))
		}
		from, _ := d.Get("from")
		fs, _ := from.(string)
		role, ok := roles[fs]
		if !ok {
			return nil, fmt.Errorf("chattemplate: sharegpt turn %d: unknown \"from\" %q", i, fs)
		}
		value, _ := d.Get("value")
		vs, ok := value.(string)
		if !ok {
			return nil, fmt.Errorf("chattemplate: sharegpt turn %d: \"value\" is a %s, want a string", i, pyTypeName(value))
		}
		m := NewDict()
		m.Set("role", role)
		m.Set("content", vs)
		if fs == "function_call" {
			call, err := ParseJSONValue([]byte(vs))
			if err != nil {
				return nil, fmt.Errorf("chattemplate: sharegpt turn %d: function_call value: %w", i, err)
			}
			cd, ok := call.(*Dict)
			if !ok {
				return nil, fmt.Errorf("chattemplate: sharegpt turn %d: function_call value is not an object", i)
			}
			name, _ := cd.Get("name")
			args, _ := cd.Get("arguments")
			fn := NewDict()
			fn.Set("name", name)
			fn.Set("arguments", args)
			tc := NewDict()
			tc.Set("type", "function")
			tc.Set("function", fn)
			m.Set("content", "")
			m.Set("tool_calls", NewList(tc))
		}
		out.Items = append(out.Items, m)
	}
	return out, nil
}

// maxTemplateFile bounds template and config files read from a directory.
const maxTemplateFile = 16 << 20

func readLimited(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Size() > maxTemplateFile {
		return nil, fmt.Errorf("chattemplate: %s: %d bytes, more than the %d allowed", path, fi.Size(), maxTemplateFile)
	}
	return os.ReadFile(path)
}

// specialTokenNames are transformers' SPECIAL_TOKENS_ATTRIBUTES.
var specialTokenNames = []string{"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}

// FromTokenizerDir loads the chat template of a Hugging Face tokenizer
// directory and its special tokens, as AutoTokenizer.from_pretrained and
// get_chat_template do: chat_template.jinja (and
// additional_chat_templates/*.jinja, by file name) take priority over the
// "chat_template" of tokenizer_config.json (a string, or a list of
// {"name", "template"}), then chat_template.json. name selects a named
// template; "" means "default" (or the only one). The special tokens are
// the tokenizer_config.json entries that are strings or AddedToken
// objects ({"content": ...}). transformers picks "tool_use", when there
// is one, for a call with tools: pass that name then.
func FromTokenizerDir(dir, name string) (*Template, map[string]string, error) {
	special := map[string]string{}
	templates := map[string]string{}
	var cfg map[string]json.RawMessage
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	if b, err := readLimited(cfgPath); err == nil {
		if err := json.Unmarshal(b, &cfg); err != nil {
			return nil, nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
		}
		special = specialTokensOf(cfg)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	if b, err := readLimited(filepath.Join(dir, "chat_template.jinja")); err == nil {
		templates["default"] = string(b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	extra, _ := filepath.Glob(filepath.Join(dir, "additional_chat_templates", "*.jinja"))
	for _, p := range extra {
		b, err := readLimited(p)
		if err != nil {
			return nil, nil, err
		}
		templates[strings.TrimSuffix(filepath.Base(p), ".jinja")] = string(b)
	}
	if len(templates) == 0 {
		if raw, ok := cfg["chat_template"]; ok {
			var s string
			var named []struct{ Name, Template string }
			switch {
			case json.Unmarshal(raw, &s) == nil:
				templates["default"] = s
			case json.Unmarshal(raw, &named) == nil:
				for _, t := range named {
					templates[t.Name] = t.Template
				}
			default:
				return nil, nil, fmt.Errorf("chattemplate: %s: chat_template is neither a string nor a list of {name, template}", cfgPath)
			}
		}
	}
	if len(templates) == 0 {
		p := filepath.Join(dir, "chat_template.json")
		if b, err := readLimited(p); err == nil {
			var ct struct {
				ChatTemplate string `json:"chat_template"`
			}
			if err := json.Unmarshal(b, &ct); err != nil {
				return nil, nil, fmt.Errorf("chattemplate: %s: %w", p, err)
			}
			templates["default"] = ct.ChatTemplate
		}
	}
	if len(templates) == 0 {
		return nil, nil, fmt.Errorf("chattemplate: %s: no chat template (chat_template.jinja, tokenizer_config.json or chat_template.json)", dir)
	}
	key := name
	if key == "" {
		key = "default"
		if _, ok := templates[key]; !ok && len(templates) == 1 {
			for k := range templates {
				key = k
			}
		}
	}
	src, ok := templates[key]
	if !ok {
		names := make([]string, 0, len(templates))
		for k := range templates {
			names = append(names, k)
		}
		sort.Strings(names)
		return nil, nil, fmt.Errorf("chattemplate: %s: no chat template named %q; have %s", dir, key, strings.Join(names, ", "))
	}
	t, err := Parse(filepath.Base(dir)+"/"+key, src)
	if err != nil {
		return nil, nil, err
	}
	return t, special, nil
}
