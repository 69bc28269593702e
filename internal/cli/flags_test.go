package cli

import (
	"errors"
	"flag"
	"io"
	"slices"
	"testing"
)

func TestParseInterspersed(t *testing.T) {
	for _, c := range []struct {
		args    []string
		pos     []string
		n       int
		verbose bool
	}{
		{[]string{"a", "-n", "3", "b"}, []string{"a", "b"}, 3, false},
		{[]string{"-v", "a"}, []string{"a"}, 0, true},
		{[]string{"a", "b", "-v"}, []string{"a", "b"}, 0, true},
		{[]string{"a", "--", "-n", "b"}, []string{"a", "-n", "b"}, 0, false},
		{nil, nil, 0, false},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		n := fs.Int("n", 0, "")
		v := fs.Bool("v", false, "")
		pos, err := ParseInterspersed(fs, c.args)
		if err != nil || !slices.Equal(pos, c.pos) || *n != c.n || *v != c.verbose {
			t.Errorf("%q: pos %q n %d v %v err %v; want %q %d %v", c.args, pos, *n, *v, err, c.pos, c.n, c.verbose)
		}
		if FlagGiven(fs, "n") != (c.n != 0) {
			t.Errorf("%q: FlagGiven(n) = %v", c.args, FlagGiven(fs, "n"))
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if _, err := ParseInterspersed(fs, []string{"a", "-nope"}); !errors.Is(err, ErrUsage) {
		t.Errorf("unknown flag: %v, want ErrUsage", err)
	}
	if _, err := ParseInterspersed(fs, []string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
}
