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

// ParseBenchLine looks at the last non-empty line of out. If it is a JSON
// object with exactly one key, "bench", holding an object of finite numbers,
// it returns those numbers. If the last line is anything else (token IDs,
// a log line, nothing), it returns nil, nil: a bench line is optional. A line
// that starts like a bench line but is malformed, or holds a value that is
// not a finite number, is an error wrapping ErrBenchLine.
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
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, fmt.Errorf("%w: \"bench\" is not an object", ErrBenchLine)
	}
	m := make(map[string]float64, len(fields))
	for k, v := range fields {
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || bytes.Equal(v, []byte("null")) {
			return nil, fmt.Errorf("%w: %q is %s, want a number", ErrBenchLine, k, clip(v, 40))
		}
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%w: %q is not finite", ErrBenchLine, k)
		}
		m[k] = f
	}
	return m, nil
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
