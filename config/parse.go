package config

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// Load reads and parses the configuration file at path; see Parse.
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return Parse(src, path)
}

// Parse decodes src, the contents of the file named filename, applies the
// defaults and validates the result. Errors name file:line:column; several
// are joined with errors.Join. Relative paths in src are made absolute
// against filename's directory.
func Parse(src []byte, filename string) (*Config, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diagError(diags)
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return nil, &Error{File: filename, Msg: "not an HCL native-syntax file"}
	}
	d := &decoder{src: src, file: filename, dir: baseDir(filename)}
	c := d.decodeFile(body)
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func baseDir(filename string) string {
	dir := filepath.Dir(filename)
	if abs, err := filepath.Abs(dir); err == nil {
		return abs
	}
	return dir
}

// decoder walks one parsed file. It collects every error rather than
// stopping at the first, so an operator fixes a file in one pass.
type decoder struct {
	src  []byte
	file string
	dir  string // absolute directory of file, for relative paths
	errs []error
}

func (d *decoder) diags(diags hcl.Diagnostics) bool {
	if !diags.HasErrors() {
		return false
	}
	d.errs = append(d.errs, diagErrors(diags)...)
	return true
}

func (d *decoder) fail(r hcl.Range, field, format string, args ...any) {
	d.errs = append(d.errs, errorAt(r, field, format, args...))
}

func (d *decoder) decodeFile(body *hclsyntax.Body) *Config {
	c := &Config{
		File: d.file,
		loc:  map[string]hcl.Range{"": {Filename: d.file, Start: hcl.InitialPos, End: hcl.InitialPos}},
	}
	// The top level's defaults (strict = true) hold for a file that does
	// not set them, as a block's do for a block left out.
	topTable.defaults(c)
	for _, b := range blocks {
		if b.preset != nil {
			b.preset(c) // a block left out still has its defaults
		}
	}
	content, diags := body.Content(rootSchema())
	d.diags(diags)
	decodeContent(d, topTable, content, c, place{loc: c.loc})

	seen := map[string]hcl.Range{}
	for _, b := range content.Blocks {
		for _, bl := range blocks {
			if bl.header.Type != b.Type {
				continue
			}
			if len(bl.header.LabelNames) == 0 {
				if first, dup := seen[b.Type]; dup {
					d.fail(b.DefRange, b.Type, "a second %s block; the first is at %s: merge them into one", b.Type, posString(first))
					break
				}
				seen[b.Type] = b.DefRange
			}
			bl.decode(d, c, b)
		}
	}
	if c.Metastore.Kind == MetastoreEmbedded && c.Metastore.Listen == "" && !c.has("metastore.listen") {
		c.Metastore.Listen = DefaultMetastoreListen
	}
	return c
}

// strings decodes a list of strings; example goes into the message.
func (d *decoder) strings(a *hcl.Attribute, field, example string) ([]string, bool) {
	v, ok := d.value(a)
	if !ok {
		return nil, false
	}
	l, err := convert.Convert(v, cty.List(cty.String))
	if err != nil || !l.IsWhollyKnown() {
		d.fail(a.Expr.Range(), field, "want a list of strings like %s, got %s", example, describe(v))
		return nil, false
	}
	var out []string
	for _, e := range l.AsValueSlice() {
		if e.IsNull() {
			d.fail(a.Expr.Range(), field, "the list holds null; want strings like %s", example)
			return nil, false
		}
		out = append(out, e.AsString())
	}
	return out, true
}

// pluginBody cuts a decoded plugin or device block's config block out of
// the source for the plugin, and returns p with it.
func (d *decoder) pluginBody(b *hcl.Block, kind string, p Plugin) Plugin {
	field := kind + "." + p.Name
	// The config block's text is cut from the source between its braces,
	// which only the native-syntax block records.
	var blocks []*hclsyntax.Block
	if sb, ok := b.Body.(*hclsyntax.Body); ok {
		blocks = sb.Blocks
	}
	var first *hclsyntax.Block
	for _, cb := range blocks {
		if cb.Type != "config" || len(cb.Labels) != 0 {
			continue // unknown blocks and labels: Content has reported them
		}
		if first != nil {
			d.fail(cb.DefRange(), field+".config", "a second config block; the first is at %s: merge them into one", posString(first.DefRange()))
			continue
		}
		first = cb
		start, end := cb.OpenBraceRange.End, cb.CloseBraceRange.Start
		if start.Byte < 0 || start.Byte > end.Byte || end.Byte > len(d.src) {
			d.fail(cb.DefRange(), field+".config", "cannot locate the block's body in the source")
			continue
		}
		p.Body = append([]byte{}, d.src[start.Byte:end.Byte]...)
		p.BodyFile = d.file
		p.BodyLine, p.BodyColumn, p.BodyByte = start.Line, start.Column, start.Byte
	}
	return p
}

// path resolves a path written in the file against the file's directory.
func (d *decoder) path(p string) string {
	if filepath.IsAbs(p) {
		return filepath.Clean(p)
	}
	return filepath.Join(d.dir, p)
}

// value evaluates a literal. A null value counts as unset.
func (d *decoder) value(a *hcl.Attribute) (cty.Value, bool) {
	v, diags := a.Expr.Value(nil)
	if d.diags(diags) {
		return cty.NilVal, false
	}
	if v.IsNull() {
		return cty.NilVal, false
	}
	if !v.IsWhollyKnown() {
		d.fail(a.Expr.Range(), "", "the value must be known without evaluation")
		return cty.NilVal, false
	}
	v, _ = v.Unmark()
	return v, true
}

func (d *decoder) str(a *hcl.Attribute, field string) (string, bool) {
	v, ok := d.value(a)
	if !ok {
		return "", false
	}
	// Whole numbers pass for strings (machine_id = 42), formatted here:
	// cty would print a number like 1e999999 in full.
	if v.Type() == cty.Number {
		if i, ok := wholeInt64(v.AsBigFloat()); ok {
			return strconv.FormatInt(i, 10), true
		}
		d.fail(a.Expr.Range(), field, "want a string, got %s; quote the value", describe(v))
		return "", false
	}
	s, err := convert.Convert(v, cty.String)
	if err != nil {
		d.fail(a.Expr.Range(), field, "want a string, got %s; quote the value", v.Type().FriendlyName())
		return "", false
	}
	return s.AsString(), true
}

func (d *decoder) boolean(a *hcl.Attribute, field string) (bool, bool) {
	v, ok := d.value(a)
	if !ok {
		return false, false
	}
	b, err := convert.Convert(v, cty.Bool)
	if err != nil {
		d.fail(a.Expr.Range(), field, "want true or false, got %s", describe(v))
		return false, false
	}
	return b.True(), true
}

// integer decodes a whole number that fits an int. example goes into the
// message.
func (d *decoder) integer(a *hcl.Attribute, field, example string) (int, bool) {
	v, ok := d.value(a)
	if !ok {
		return 0, false
	}
	n, err := convert.Convert(v, cty.Number)
	if err != nil {
		d.fail(a.Expr.Range(), field, "want a whole number like %s, got %s", example, describe(v))
		return 0, false
	}
	i, ok := wholeInt64(n.AsBigFloat())
	if !ok || int64(int(i)) != i {
		d.fail(a.Expr.Range(), field, "want a whole number like %s, got %s", example, describe(v))
		return 0, false
	}
	return int(i), true
}

// size decodes a byte count: a number, or a string for ParseSize.
func (d *decoder) size(a *hcl.Attribute, field string) (int64, bool) {
	v, ok := d.value(a)
	if !ok {
		return 0, false
	}
	switch v.Type() {
	case cty.Number:
		i, ok := wholeInt64(v.AsBigFloat())
		if !ok || i < 0 {
			d.fail(a.Expr.Range(), field, "want a non-negative whole number of bytes or a size like \"1MiB\", got %s", describe(v))
			return 0, false
		}
		return i, true
	case cty.String:
		n, err := ParseSize(v.AsString())
		if err != nil {
			d.fail(a.Expr.Range(), field, "%v", err)
			return 0, false
		}
		return n, true
	}
	d.fail(a.Expr.Range(), field, "want a size like \"1MiB\" or a number of bytes, got %s", describe(v))
	return 0, false
}

func (d *decoder) duration(a *hcl.Attribute, field string) (time.Duration, bool) {
	v, ok := d.value(a)
	if !ok {
		return 0, false
	}
	if v.Type() != cty.String {
		d.fail(a.Expr.Range(), field, "want a duration string like \"20us\" or \"0s\", got %s", describe(v))
		return 0, false
	}
	t, err := time.ParseDuration(v.AsString())
	if err != nil {
		d.fail(a.Expr.Range(), field, "%q is not a duration; write it like \"20us\", \"1ms\" or \"0s\"", v.AsString())
		return 0, false
	}
	return t, true
}

func wholeInt64(f *big.Float) (int64, bool) {
	if f == nil || f.IsInf() || !f.IsInt() {
		return 0, false
	}
	i, acc := f.Int64()
	return i, acc == big.Exact
}

// describe names a value for an error message: its literal when short.
func describe(v cty.Value) string {
	switch v.Type() {
	case cty.String:
		s := v.AsString()
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return fmt.Sprintf("the string %q", s)
	case cty.Number:
		// Formatting a number with a huge exponent takes seconds.
		f := v.AsBigFloat()
		if exp := f.MantExp(nil); exp < -256 || exp > 256 {
			return "a number out of range"
		}
		return "the number " + f.Text('g', 20)
	case cty.Bool:
		return fmt.Sprintf("%t", v.True())
	}
	return v.Type().FriendlyName()
}

// diagErrors converts HCL's error diagnostics into *Error values.
func diagErrors(diags hcl.Diagnostics) []error {
	var errs []error
	for _, dg := range diags {
		if dg.Severity != hcl.DiagError {
			continue
		}
		msg := dg.Summary
		if dg.Detail != "" {
			msg += ": " + dg.Detail
		}
		e := &Error{Msg: msg}
		if dg.Subject != nil {
			e.File, e.Line, e.Column = dg.Subject.Filename, dg.Subject.Start.Line, dg.Subject.Start.Column
		}
		errs = append(errs, e)
	}
	return errs
}

func diagError(diags hcl.Diagnostics) error {
	return errors.Join(diagErrors(diags)...)
}

func (c *Config) has(field string) bool {
	_, ok := c.loc[field]
	return ok
}
