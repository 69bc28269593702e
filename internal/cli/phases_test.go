package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestPhases(t *testing.T) {
	var buf bytes.Buffer
	p := NewPhases(&buf, false, 0, "x[part 1/3]")
	defer p.Stop()
	if l := p.line(); l != "" {
		t.Errorf("before a phase: %q", l)
	}
	p.Phase("write", 4)
	p.Add(1)
	if l := p.line(); !strings.HasPrefix(l, "x[part 1/3]: write    1/4 (25%) ") {
		t.Errorf("line %q", l)
	}
	p.Phase("read", 0)
	if l := p.line(); !strings.HasPrefix(l, "x[part 1/3]: read     ") || strings.Contains(l, "/") && !strings.Contains(l, "part 1/3") {
		t.Errorf("line %q", l)
	}
	p.Logf("skipped %d", 3)
	p.Stop()
	if !strings.Contains(buf.String(), "x[part 1/3]: skipped 3") {
		t.Errorf("log: %q", buf.String())
	}
}
