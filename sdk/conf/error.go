package conf

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Error is one problem in a configuration: "file:line:col: field:
// message". Decoders return one *Error, or several joined with
// errors.Join; find them with errors.As.
type Error struct {
	File   string // "" when the configuration was built in code
	Line   int    // 1-based; 0 when unknown
	Column int    // 1-based; 0 when unknown
	Field  string // the setting as messages name it ("transfer.ring_depth", "tcp config: listen"); may be ""
	Msg    string // what is wrong and what to do
	// Err is the cause Msg names, if any, for errors.Is and errors.As.
	Err error
}

// Error formats the problem as "file:line:col: field: message".
func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d:%d", e.Line, e.Column)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the cause, if any.
func (e *Error) Unwrap() error { return e.Err }

// ErrorAt builds an Error located at r; a zero r leaves the location out.
// A %w verb in format makes its argument the cause.
func ErrorAt(r hcl.Range, field, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	e := &Error{File: r.Filename, Field: field, Msg: err.Error(), Err: errors.Unwrap(err)}
	if r.Start.Line > 0 {
		e.Line, e.Column = r.Start.Line, r.Start.Column
	}
	return e
}

// PosString formats the start of r as "file:line:col".
func PosString(r hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}

// DiagErrors converts HCL's error diagnostics into *Error values, each
// naming field (may be "").
func DiagErrors(diags hcl.Diagnostics, field string) []error {
	var errs []error
	for _, dg := range diags {
		if dg.Severity != hcl.DiagError {
			continue
		}
		msg := dg.Summary
		if dg.Detail != "" {
			msg += ": " + dg.Detail
		}
		e := &Error{Field: field, Msg: msg}
		if dg.Subject != nil {
			e.File, e.Line, e.Column = dg.Subject.Filename, dg.Subject.Start.Line, dg.Subject.Start.Column
		}
		errs = append(errs, e)
	}
	return errs
}
