package cli

import (
	"errors"
	"flag"
	"fmt"
)

// ParseInterspersed parses fs's flags from args with the positional
// arguments before, between or after them ("--" ends flag parsing: what
// follows is positional), and returns the positional arguments in order. A
// flag error wraps ErrUsage; flag.ErrHelp is returned as is.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, fmt.Errorf("%w: %v", ErrUsage, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// FlagGiven reports whether the flag name was given on the command line
// (not merely left at its default).
func FlagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
