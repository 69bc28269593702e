package prep

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/ferryml/ferry/internal/storage"
	"github.com/ferryml/ferry/shard"
)

// Recipe is a mixture (dataprep --recipe FILE, docs/mixtures.md): several
// sources, each with its own inputs and format and either a weight (a
// share of the output's tokens) or a repeat count (epochs of the source).
type Recipe struct {
	Path string // the recipe file, as errors name it
	Text string // its text (the manifest keeps it)
	// Tokens is the output's tokens when every source has a weight
	// (recipe key tokens); 0: the sum of the sources' tokens.
	Tokens  int64
	Sources []RecipeSource
}

// RecipeSource is one source of a Recipe, in recipe order: its index is
// the source id of its rows' segments.
type RecipeSource struct {
	Name   string
	Inputs []string // files, globs or s3:// URLs; relative paths are relative to the recipe's directory
	// Format is alpaca or chat; "": detected from the first input, as
	// dataprep --format does (alpaca unless the records are chat).
	Format string
	// Template is an Alpaca prompt template file; ChatTemplate and
	// TemplateName pick a chat source's template; Labels its labels
	// policy (default: --labels when it is one of the format's, else the
	// format's default). MaxRecords uses only the first N records.
	Template, ChatTemplate, TemplateName string
	Labels                               shard.Labels
	MaxRecords                           int64
	// Weight or Repeat: exactly one is set (> 0).
	Weight, Repeat *float64
	Line           int // the line of the source's entry in the recipe
}

// ReadRecipe reads and checks a recipe file (YAML, or JSON, which the
// YAML reader reads too).
func ReadRecipe(path string) (*Recipe, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, configErr("--recipe: %v", err)
	}
	return ParseRecipe(path, data)
}

// recipeKeys and sourceKeys are the keys a recipe may have.
var (
	recipeKeys = []string{"sources", "tokens"}
	sourceKeys = []string{"name", "inputs", "format", "template", "chat_template", "template_name", "labels", "max_records", "weight", "repeat"}
)

// ParseRecipe parses a recipe; path names it in errors, which wrap
// ErrConfig and give the line: "recipe.yaml:7: ...". Relative inputs are
// made relative to path's directory.
func ParseRecipe(path string, data []byte) (*Recipe, error) {
	bad := func(line int, format string, a ...any) error {
		return configErr("%s:%d: %s", path, line, fmt.Sprintf(format, a...))
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, configErr("%s: %v", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, bad(max(doc.Line, 1), "want a mapping with sources: [...]")
	}
	r := &Recipe{Path: path, Text: string(data)}
	top := doc.Content[0]
	var sources *yaml.Node
	err := eachKey(top, recipeKeys, bad, func(k string, v *yaml.Node) error {
		switch k {
		case "sources":
			sources = v
		case "tokens":
			n, err := strconv.ParseInt(v.Value, 10, 64)
			if v.Kind != yaml.ScalarNode || err != nil || n < 1 {
				return bad(v.Line, "tokens %q: want a whole number >= 1", v.Value)
			}
			r.Tokens = n
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if sources == nil || sources.Kind != yaml.SequenceNode || len(sources.Content) == 0 {
		line := top.Line
		if sources != nil {
			line = sources.Line
		}
		return nil, bad(line, "sources: want a list of one or more sources")
	}
	dir := filepath.Dir(path)
	names := map[string]int{}
	for _, sn := range sources.Content {
		s, err := parseSource(sn, dir, bad)
		if err != nil {
			return nil, err
		}
		if l, ok := names[s.Name]; ok {
			return nil, bad(s.Line, "source %q: the name is already that of the source at line %d", s.Name, l)
		}
		names[s.Name] = s.Line
		r.Sources = append(r.Sources, s)
	}
	var weighted, repeated []string
	for _, s := range r.Sources {
		if s.Weight != nil {
			weighted = append(weighted, s.Name)
		} else {
			repeated = append(repeated, s.Name)
		}
	}
	if r.Tokens > 0 && len(repeated) > 0 {
		return nil, bad(top.Line, "tokens: only for a recipe whose sources all have a weight (source %q has a repeat: the output's size follows from it)", repeated[0])
	}
	if len(weighted) > 0 && len(repeated) > 0 {
		var sum float64
		for _, s := range r.Sources {
			if s.Weight != nil {
				sum += *s.Weight
			}
		}
		if sum >= 1 {
			return nil, bad(sources.Line, "the weights of %s sum to %g: next to repeat sources (%s), weights are shares of the output and must sum to less than 1",
				strings.Join(weighted, ", "), sum, strings.Join(repeated, ", "))
		}
	}
	return r, nil
}

// eachKey calls f for every key of mapping n, refusing keys not in known
// and keys given twice.
func eachKey(n *yaml.Node, known []string, bad func(int, string, ...any) error, f func(k string, v *yaml.Node) error) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		kn, v := n.Content[i], n.Content[i+1]
		k := kn.Value
		ok := false
		for _, w := range known {
			ok = ok || k == w
		}
		if !ok {
			return bad(kn.Line, "unknown key %q (want %s)", k, strings.Join(known, ", "))
		}
		if seen[k] {
			return bad(kn.Line, "key %q given twice", k)
		}
		seen[k] = true
		if err := f(k, v); err != nil {
			return err
		}
	}
	return nil
}

func parseSource(n *yaml.Node, dir string, bad func(int, string, ...any) error) (RecipeSource, error) {
	s := RecipeSource{Line: n.Line}
	if n.Kind != yaml.MappingNode {
		return s, bad(n.Line, "a source: want a mapping with name, inputs and weight or repeat")
	}
	str := func(v *yaml.Node, k string) (string, error) {
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			return "", bad(v.Line, "%s: want a non-empty string", k)
		}
		return v.Value, nil
	}
	num := func(v *yaml.Node, k string) (*float64, error) {
		x, err := strconv.ParseFloat(v.Value, 64)
		if v.Kind != yaml.ScalarNode || err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return nil, bad(v.Line, "%s %q: want a number", k, v.Value)
		}
		if x <= 0 {
			return nil, bad(v.Line, "%s %s: want a number > 0", k, v.Value)
		}
		return &x, nil
	}
	err := eachKey(n, sourceKeys, bad, func(k string, v *yaml.Node) error {
		var err error
		switch k {
		case "name":
			s.Name, err = str(v, k)
		case "inputs":
			if v.Kind == yaml.ScalarNode && v.Value != "" {
				s.Inputs = []string{v.Value}
				break
			}
			if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
				return bad(v.Line, "inputs: want a list of one or more files, globs or s3:// URLs")
			}
			for _, in := range v.Content {
				p, err := str(in, "inputs")
				if err != nil {
					return err
				}
				s.Inputs = append(s.Inputs, p)
			}
		case "format":
			s.Format, err = str(v, k)
			if err == nil && s.Format != FormatAlpaca && s.Format != FormatChat {
				err = bad(v.Line, "format %q: want alpaca or chat", s.Format)
			}
		case "template":
			s.Template, err = str(v, k)
		case "chat_template":
			s.ChatTemplate, err = str(v, k)
		case "template_name":
			s.TemplateName, err = str(v, k)
		case "labels":
			var l string
			if l, err = str(v, k); err == nil {
				if _, perr := shard.ParseLabels(l); perr != nil {
					err = bad(v.Line, "labels %q: want mask-pad, copy or mask-prompt (alpaca), assistant, last-assistant, generation or all (chat)", l)
				}
				s.Labels = shard.Labels(l)
			}
		case "max_records":
			x, perr := strconv.ParseInt(v.Value, 10, 64)
			if v.Kind != yaml.ScalarNode || perr != nil || x < 1 {
				err = bad(v.Line, "max_records %q: want a whole number >= 1", v.Value)
			}
			s.MaxRecords = x
		case "weight":
			s.Weight, err = num(v, k)
		case "repeat":
			s.Repeat, err = num(v, k)
		}
		return err
	})
	if err != nil {
		return s, err
	}
	switch {
	case s.Name == "":
		return s, bad(n.Line, "a source without a name")
	case len(s.Inputs) == 0:
		return s, bad(n.Line, "source %q has no inputs", s.Name)
	case s.Weight != nil && s.Repeat != nil:
		return s, bad(n.Line, "source %q has both weight and repeat: give one (weight: a share of the output's tokens; repeat: epochs of the source)", s.Name)
	case s.Weight == nil && s.Repeat == nil:
		return s, bad(n.Line, "source %q has neither weight nor repeat", s.Name)
	case s.Format == FormatAlpaca && (s.ChatTemplate != "" || s.TemplateName != ""):
		return s, bad(n.Line, "source %q: chat_template and template_name are for format chat", s.Name)
	case s.Format == FormatChat && s.Template != "":
		return s, bad(n.Line, "source %q: template is for format alpaca (chat sources take chat_template)", s.Name)
	}
	for i, in := range s.Inputs {
		s.Inputs[i] = relTo(dir, in)
	}
	if s.Template != "" {
		s.Template = relTo(dir, s.Template)
	}
	if s.ChatTemplate != "" {
		s.ChatTemplate = relTo(dir, s.ChatTemplate)
	}
	return s, nil
}

// relTo makes a relative local path relative to dir.
func relTo(dir, p string) string {
	if _, local := storage.LocalPath(p); !local || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(dir, p)
}

// sourceErr names the recipe line of source s in err.
func (r *Recipe) sourceErr(s *RecipeSource, err error) error {
	return fmt.Errorf("%s:%d: source %q: %w", r.Path, s.Line, s.Name, err)
}
