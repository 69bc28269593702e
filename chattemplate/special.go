package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// SpecialTokens returns the special tokens of a Hugging Face tokenizer
// directory as its chat template sees them (bos_token, eos_token, ...):
// the tokenizer_config.json entries that are strings or AddedToken objects
// ({"content": ...}). A directory without tokenizer_config.json has none.
func SpecialTokens(dir string) (map[string]string, error) {
	cfgPath := filepath.Join(dir, "tokenizer_config.json")
	b, err := readLimited(cfgPath)
	if errors.Is(err, os.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, err
	}
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("chattemplate: %s: %w", cfgPath, err)
	}
	return specialTokensOf(cfg), nil
}

// specialTokensOf reads the special tokens of a parsed tokenizer_config.json.
func specialTokensOf(cfg map[string]json.RawMessage) map[string]string {
	special := map[string]string{}
	for _, k := range specialTokenNames {
		raw, ok := cfg[k]
		if !ok || string(raw) == "null" {
			continue
		}
		var s string
		if json.Unmarshal(raw, &s) == nil {
			special[k] = s
			continue
		}
		var at struct {
			Content *string `json:"content"`
		}
		if json.Unmarshal(raw, &at) == nil && at.Content != nil {
			special[k] = *at.Content
		}
	}
	return special
}
