package chattemplate

import (
	"errors"
	"fmt"
)

// Errors are *Error values; match their kind with errors.Is.
var (
	// ErrSyntax: the template does not parse.
	ErrSyntax = errors.New("chattemplate: syntax error")
	// ErrUnsupported: the template uses a construct this package does not
	// implement (it never renders something else instead).
	ErrUnsupported = errors.New("chattemplate: not implemented")
	// ErrRaised: the template called raise_exception(msg); Error.Msg is msg.
	ErrRaised = errors.New("chattemplate: raise_exception")
	// ErrUndefined: an undefined value was used where jinja2 raises
	// UndefinedError (an attribute of it, arithmetic on it, ...).
	ErrUndefined = errors.New("chattemplate: undefined")
	// ErrType: a Python TypeError, ValueError, KeyError, ZeroDivisionError
	// or IndexError in the template.
	ErrType = errors.New("chattemplate: type error")
	// ErrLimit: rendering went past a bound (output size, loop steps,
	// call depth).
	ErrLimit = errors.New("chattemplate: limit exceeded")
	// ErrSecurity: the sandbox refused an operation (a method that
	// mutates, an underscore attribute).
	ErrSecurity = errors.New("chattemplate: security error")
)

// Error is an error in a template, naming the template and its line.
type Error struct {
	Template string // the name given to Parse
	Line     int    // 1-based line of the template; 0 if unknown
	Msg      string // for ErrRaised, exactly the template's message
	kind     error
}

func (e *Error) Error() string {
	what := ""
	switch e.kind {
	case ErrRaised:
		what = "raise_exception: "
	case ErrUnsupported:
		what = "not implemented: "
	case ErrLimit:
		what = "limit: "
	}
	return fmt.Sprintf("chattemplate: %s:%d: %s%s", e.Template, e.Line, what, e.Msg)
}

// Unwrap returns the kind (ErrSyntax, ErrRaised, ...).
func (e *Error) Unwrap() error { return e.kind }

// pyErr is an error raised while evaluating, before the line is known.
type pyErr struct {
	kind error
	msg  string
}

func (e *pyErr) Error() string { return e.msg }

func typeErr(format string, args ...any) error {
	return &pyErr{ErrType, fmt.Sprintf(format, args...)}
}

func undefErr(u undefined) error { return &pyErr{ErrUndefined, u.hint} }

func unsupportedErr(format string, args ...any) error {
	return &pyErr{ErrUnsupported, fmt.Sprintf(format, args...)}
}
