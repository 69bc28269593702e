package harness

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
)

// ErrBenchLine marks a last stdout line that announces itself as a bench
// line (it starts with `{"bench"`) but is not a valid one.
var ErrBenchLine = errors.New("harness: bad bench line")

// maxBenchLine bounds the bench line; a longer last line is not one.
const maxBenchLine = 64 << 10

// maxBenchDepth bounds the nesting of objects inside a bench line.
const maxBenchDepth = 8

// ParseBenchLine looks at the last non-empty line of out. If it is a JSON
// object with exactly one key, "bench", holding an object, it returns the
// numbers in it. Nested objects are flattened with dotted keys
// ({"a": {"b": 1}} gives "a.b"); values that are not numbers or objects
// (strings, arrays, booleans, null) are labels, not metrics, and are left
// out. If the last line is anything else (token IDs, a log line, nothing),
// it returns nil, nil: a bench line is optional. A line that starts like a
// bench line but is malformed JSON, whose "bench" is not an object, or
// that holds a number out of float64 range, is an error wrapping
// ErrBenchLine.
func ParseBenchLine(out []byte) (map[string]float64, error) {
	line := lastLine(out)
	if !bytes.HasPrefix(line, []byte(`{"bench"`)) {
		return nil, nil
	}
	if len(line) > maxBenchLine {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrBenchLine, len(line), maxBenchLine)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(line, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBenchLine, err)
	}
	if len(doc) != 1 {
		return nil, fmt.Errorf("%w: %d top-level keys, want only \"bench\"", ErrBenchLine, len(doc))
	}
	raw, ok := doc["bench"]
	if !ok {
		return nil, fmt.Errorf("%w: no \"bench\" key", ErrBenchLine)
	}
	m := map[string]float64{}
	if err := flatten(m, "", raw, 0); err != nil {
		return nil, err
	}
	return m, nil
}

// flatten adds the numbers of the JSON object raw to m, under prefix.
func flatten(m map[string]float64, prefix string, raw json.RawMessage, depth int) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		if prefix == "" {
			return fmt.Errorf("%w: \"bench\" is not an object", ErrBenchLine)
		}
		return nil
	}
	if depth >= maxBenchDepth {
		return fmt.Errorf("%w: objects nested deeper than %d", ErrBenchLine, maxBenchDepth)
	}
	for k, v := range fields {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		v = bytes.TrimSpace(v)
		if len(v) == 0 {
			continue
		}
		switch c := v[0]; {
		case c == '{':
			if err := flatten(m, key, v, depth+1); err != nil {
				return err
			}
		case c == '-' || c >= '0' && c <= '9':
			var f float64
			if err := json.Unmarshal(v, &f); err != nil {
				return fmt.Errorf("%w: %q is %s, not a float64", ErrBenchLine, key, clip(v, 40))
			}
			if math.IsNaN(f) || math.IsInf(f, 0) {
				return fmt.Errorf("%w: %q is not finite", ErrBenchLine, key)
			}
			m[key] = f
		}
	}
	return nil
}

// lastLine returns the last line of b that holds more than white space,
// without its line terminator and surrounding blanks.
func lastLine(b []byte) []byte {
	for len(b) > 0 {
		b = bytes.TrimRight(b, " \t\r\n")
		i := bytes.LastIndexByte(b, '\n')
		line := bytes.TrimSpace(b[i+1:])
		if len(line) > 0 {
			return line
		}
		if i < 0 {
			return nil
		}
		b = b[:i]
	}
	return nil
}

func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
