// Package logargs rewrites the values of a logger's key/value arguments
// before they are written: plugins log durations as text (JSON would make
// them nanosecond numbers), and the host logs whole numbers that came
// through a plugin's JSON lines as integers (go-plugin decodes every
// number as float64, which prints 67108864 as 6.7108864e+07). It owns no
// output of its own and must not drop or reorder arguments.
package logargs

import (
	"math"
	"time"

	hclog "github.com/hashicorp/go-hclog"
)

// Map returns l with f applied to the value of every key/value argument,
// in the logger and in every logger derived from it (With, Named).
func Map(l hclog.Logger, f func(any) (any, bool)) hclog.Logger {
	return mapped{Logger: l, f: f}
}

// Durations writes a time.Duration as its String form ("1.5s").
func Durations(v any) (any, bool) {
	if d, ok := v.(time.Duration); ok {
		return d.String(), true
	}
	return v, false
}

// WholeFloats writes a float64 that holds a whole number below 2^53 as
// an int64.
func WholeFloats(v any) (any, bool) {
	if x, ok := v.(float64); ok && x == math.Trunc(x) && math.Abs(x) < 1<<53 {
		return int64(x), true
	}
	return v, false
}

type mapped struct {
	hclog.Logger
	f func(any) (any, bool)
}

// args returns args with f applied to each value, copying only when f
// changes one.
func (l mapped) args(args []any) []any {
	var out []any
	for i := 1; i < len(args); i += 2 {
		v, changed := l.f(args[i])
		if !changed {
			continue
		}
		if out == nil {
			out = append([]any(nil), args...)
		}
		out[i] = v
	}
	if out == nil {
		return args
	}
	return out
}

func (l mapped) Log(level hclog.Level, msg string, args ...any) {
	l.Logger.Log(level, msg, l.args(args)...)
}
func (l mapped) Trace(msg string, args ...any) { l.Logger.Trace(msg, l.args(args)...) }
func (l mapped) Debug(msg string, args ...any) { l.Logger.Debug(msg, l.args(args)...) }
func (l mapped) Info(msg string, args ...any)  { l.Logger.Info(msg, l.args(args)...) }
func (l mapped) Warn(msg string, args ...any)  { l.Logger.Warn(msg, l.args(args)...) }
func (l mapped) Error(msg string, args ...any) { l.Logger.Error(msg, l.args(args)...) }
func (l mapped) With(args ...any) hclog.Logger {
	return mapped{Logger: l.Logger.With(l.args(args)...), f: l.f}
}
func (l mapped) Named(name string) hclog.Logger {
	return mapped{Logger: l.Logger.Named(name), f: l.f}
}
func (l mapped) ResetNamed(name string) hclog.Logger {
	return mapped{Logger: l.Logger.ResetNamed(name), f: l.f}
}
