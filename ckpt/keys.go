package ckpt

import (
	"fmt"
	"regexp"
	"strings"
)

// wrapperComponents are module names that wrappers insert into parameter
// names: FSDP1, activation checkpointing, torch.compile, very old FSDP.
var wrapperComponents = map[string]bool{
	"_fsdp_wrapped_module":       true,
	"_checkpoint_wrapped_module": true,
	"_orig_mod":                  true,
	"_fpw_module":                true,
}

// trainingStateRoots are top-level keys of training state that is not part
// of the model (accelerate, torchtitan, FSDP optim_state_dict).
var trainingStateRoots = map[string]bool{
	"optimizer":     true,
	"optim":         true,
	"optimizers":    true,
	"lr_scheduler":  true,
	"lr_schedulers": true,
	"scheduler":     true,
	"dataloader":    true,
	"train_state":   true,
}

// Rename is one --rename rule: every match of Pattern in a tensor name is
// replaced by Replacement (regexp syntax, $1 for groups).
type Rename struct {
	Pattern     *regexp.Regexp
	Replacement string
}

// ParseRename parses "REGEXP=REPLACEMENT".
func ParseRename(s string) (Rename, error) {
	i := strings.Index(s, "=")
	if i <= 0 {
		return Rename{}, fmt.Errorf("%w: --rename %q: want REGEXP=REPLACEMENT", ErrConfig, s)
	}
	re, err := regexp.Compile(s[:i])
	if err != nil {
		return Rename{}, fmt.Errorf("%w: --rename %q: %v", ErrConfig, s, err)
	}
	return Rename{Pattern: re, Replacement: s[i+1:]}, nil
}

// KeyOptions controls which items become output tensors and their names.
type KeyOptions struct {
	// IncludeOptimizer keeps optimizer and other training-state tensors
	// (optimizer.*, lr_scheduler.*, ...). Bytes items are never written.
	IncludeOptimizer bool
	// StripPrefixes are removed, in order, from names that start with them.
	StripPrefixes []string
	// Renames are applied, in order, after the prefixes are stripped.
	Renames []Rename
	// KeepKeys disables the automatic cleaning (accelerate's "model."
	// wrapper, FSDP/compile wrapper components, DDP's "module.").
	KeepKeys bool
}

// Skipped is an item left out of the output, with the reason.
type Skipped struct {
	Key    string `json:"key"`
	Reason string `json:"reason"`
}

// Selected is an item chosen for the output with its output name.
type Selected struct {
	Name string
	Item *Item
}

// SelectTensors picks the items that go into the output and names them, in
// state-dict order. Naming: leading planner_data path components that every
// tensor shares and that are not training state (the "app" of PyTorch's
// recipe, dcp.save({"app": AppState}) with AppState.state_dict() =
// {"model": ..., "optim": ...}) are dropped; then when the path is
// ("model", NAME) (accelerate's {"model": state_dict}, ferry.dcp,
// torchtitan) the name is NAME; a checkpoint without planner_data whose keys
// all start with "model." and some with "model.model." (accelerate's layout)
// loses the first "model."; wrapper components (_fsdp_wrapped_module,
// _checkpoint_wrapped_module, _orig_mod, _fpw_module) are dropped anywhere,
// and a "module." prefix shared by all names (DDP) is dropped. Then
// StripPrefixes and Renames apply. Two items mapped to one name is an error.
// Training state is recognised by the first path component left (or the
// key's first dotted component without planner_data), with KeepKeys too.
func SelectTensors(md *Metadata, o KeyOptions) ([]Selected, []Skipped, error) {
	var sel []Selected
	var skip []Skipped
	shared := sharedRoot(md)
	for _, it := range md.Items {
		if it.Kind == KindBytes {
			skip = append(skip, Skipped{it.Key, "bytes item (not a tensor)"})
			continue
		}
		path := it.Path
		if len(path) > shared {
			path = path[shared:]
		}
		root := it.Key
		if len(path) > 0 {
			root = path[0]
		} else if i := strings.IndexByte(root, '.'); i >= 0 {
			root = root[:i]
		}
		if trainingStateRoots[root] && !o.IncludeOptimizer {
			skip = append(skip, Skipped{it.Key, "training state (use --include-optimizer)"})
			continue
		}
		name := it.Key
		switch {
		case o.KeepKeys:
		case len(path) >= 2 && path[0] == "model":
			name = strings.Join(path[1:], ".")
		case shared > 0 && len(it.Path) > shared:
			name = strings.Join(path, ".")
		}
		sel = append(sel, Selected{Name: name, Item: it})
	}
	if !o.KeepKeys {
		if !md.HasPlannerData && allHavePrefix(sel, "model.", "model.model.") {
			for i := range sel {
				sel[i].Name = strings.TrimPrefix(sel[i].Name, "model.")
			}
		}
		for i := range sel {
			sel[i].Name = dropWrappers(sel[i].Name)
		}
		if allHavePrefix(sel, "module.", "") {
			for i := range sel {
				sel[i].Name = strings.TrimPrefix(sel[i].Name, "module.")
			}
		}
	}
	for i := range sel {
		n := sel[i].Name
		for _, p := range o.StripPrefixes {
			n = strings.TrimPrefix(n, p)
		}
		for _, r := range o.Renames {
			n = r.Pattern.ReplaceAllString(n, r.Replacement)
		}
		sel[i].Name = n
	}
	seen := map[string]string{}
	for _, s := range sel {
		if s.Name == "" {
			return nil, nil, fmt.Errorf("%w: tensor %q maps to an empty name", ErrConfig, s.Item.Key)
		}
		if s.Name == "__metadata__" {
			return nil, nil, fmt.Errorf("%w: tensor %q maps to the reserved name __metadata__", ErrConfig, s.Item.Key)
		}
		if prev, ok := seen[s.Name]; ok {
			return nil, nil, fmt.Errorf("%w: tensors %q and %q both map to %q", ErrConfig, prev, s.Item.Key, s.Name)
		}
		seen[s.Name] = s.Item.Key
	}
	return sel, skip, nil
}

// sharedRoot returns how many leading planner_data path components every
// tensor item shares, counting only components that are not training state
// and leaving every path at least one component.
func sharedRoot(md *Metadata) int {
	var first []string
	n := -1
	for _, it := range md.Items {
		if it.Kind != KindTensor {
			continue
		}
		if len(it.Path) < 2 {
			return 0
		}
		if n < 0 {
			first, n = it.Path, len(it.Path)-1
			continue
		}
		n = min(n, len(it.Path)-1)
		for i := 0; i < n; i++ {
			if it.Path[i] != first[i] {
				n = i
				break
			}
		}
	}
	for i := 0; i < n; i++ {
		if trainingStateRoots[first[i]] {
			return i
		}
	}
	return max(n, 0)
}

// allHavePrefix reports whether every name starts with prefix and, when
// some is not empty, at least one starts with some.
func allHavePrefix(sel []Selected, prefix, some string) bool {
	if len(sel) == 0 {
		return false
	}
	found := some == ""
	for _, s := range sel {
		if !strings.HasPrefix(s.Name, prefix) {
			return false
		}
		if !found && strings.HasPrefix(s.Name, some) {
			found = true
		}
	}
	return found
}

func dropWrappers(name string) string {
	if !strings.Contains(name, "_") {
		return name
	}
	parts := strings.Split(name, ".")
	out := parts[:0]
	for _, p := range parts {
		if !wrapperComponents[p] {
			out = append(out, p)
		}
	}
	return strings.Join(out, ".")
}
