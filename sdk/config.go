package sdk

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// DecodeConfig decodes the plugin's undecoded HCL config body (cfg.Config,
// the text of the operator's `config { ... }` block) into v, a non-nil
// pointer to a struct with gohcl `hcl:"..."` tags.
//
// Errors point into the operator's file: the body is parsed as if it sat at
// cfg.ConfigFile, line cfg.ConfigLine, column cfg.ConfigColumn, and every
// problem is reported as "file:line:column: summary: detail"; several are
// joined with errors.Join. Unknown attributes and blocks, wrong types and
// syntax errors are all reported.
//
// Fields of v that the body does not set keep their values, so set defaults
// in v before the call; an empty body (no config block at all) leaves v
// unchanged. Attributes tagged as required are reported missing, also for
// an empty body. Only literals are allowed: no variables or functions.
func DecodeConfig(cfg StartConfig, v any) (err error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("sdk.DecodeConfig: want a non-nil pointer to a struct, got %T", v)
	}
	file := cfg.ConfigFile
	if file == "" {
		file = "<plugin config>"
	}
	start := hcl.Pos{Line: max(cfg.ConfigLine, 1), Column: max(cfg.ConfigColumn, 1), Byte: max(cfg.ConfigByte, 0)}
	f, diags := hclsyntax.ParseConfig(cfg.Config, file, start)
	if diags.HasErrors() {
		return diagnosticsError(diags)
	}
	// gohcl panics on a target whose tags it cannot use: that is the
	// plugin author's bug, but it must not take the plugin process down.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("sdk.DecodeConfig: cannot decode into %T: %v", v, r)
		}
	}()
	if diags := gohcl.DecodeBody(f.Body, nil, v); diags.HasErrors() {
		return diagnosticsError(diags)
	}
	return nil
}

// diagnosticsError formats HCL error diagnostics as
// "file:line:column: summary: detail", one error each.
func diagnosticsError(diags hcl.Diagnostics) error {
	var errs []error
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		if d.Subject != nil {
			msg = fmt.Sprintf("%s:%d:%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, msg)
		}
		errs = append(errs, errors.New(msg))
	}
	return errors.Join(errs...)
}

// ConfigErrorf returns an error about the plugin's configuration, located
// at at (an attribute's range, as DecodeConfig leaves it in `hcl:"...,
// attr_value_range"` fields) or, when at is unknown, where the config
// block starts in the operator's file: "file:line:col: message".
func ConfigErrorf(cfg StartConfig, at hcl.Range, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case at.Filename != "" && at.Start.Line > 0:
		return fmt.Errorf("%s:%d:%d: %s", at.Filename, at.Start.Line, at.Start.Column, msg)
	case cfg.ConfigFile != "":
		return fmt.Errorf("%s:%d:%d: %s", cfg.ConfigFile, cfg.ConfigLine, cfg.ConfigColumn, msg)
	}
	return errors.New(msg)
}
