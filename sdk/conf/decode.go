package conf

import (
	"fmt"
	"math/big"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// Decoder walks one parsed file. It collects every error rather than
// stopping at the first, so an operator fixes a file in one pass.
type Decoder struct {
	Dir  string // absolute directory of the file, for relative paths
	Errs []error
	// Prefix goes before the field of HCL's own errors ("tcp config");
	// "" for none.
	Prefix string
}

// NewDecoder returns a decoder of the file named filename.
func NewDecoder(filename string) *Decoder {
	dir := filepath.Dir(filename)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return &Decoder{Dir: dir}
}

// Diags records HCL's errors and reports whether there were any.
func (d *Decoder) Diags(diags hcl.Diagnostics) bool {
	if !diags.HasErrors() {
		return false
	}
	d.Errs = append(d.Errs, DiagErrors(diags, d.Prefix)...)
	return true
}

// Fail records a problem with field, located at r.
func (d *Decoder) Fail(r hcl.Range, field, format string, args ...any) {
	d.Errs = append(d.Errs, ErrorAt(r, field, format, args...))
}

// Place says where a table's settings are recorded and named: Loc gets
// each attribute's range under LocPrefix+name, and errors name the
// setting FieldPrefix+name.
type Place struct {
	Loc         map[string]hcl.Range
	LocPrefix   string
	FieldPrefix string
}

// Sub is the place of the nested block name.
func (p Place) Sub(name string) Place {
	return Place{Loc: p.Loc, LocPrefix: p.LocPrefix + name + ".", FieldPrefix: p.FieldPrefix + name + "."}
}

// Has reports whether the file wrote the setting name (within the block).
func (p Place) Has(name string) bool {
	_, ok := p.Loc[p.LocPrefix+name]
	return ok
}

// DecodeBody decodes body into dst by t, recording locations at pl.
func DecodeBody[T any](d *Decoder, t *Table[T], body hcl.Body, dst *T, pl Place) {
	content, diags := Content(body, t.Schema())
	d.Diags(diags)
	DecodeContent(d, t, content, dst, pl)
}

// DecodeContent decodes a block's content by t: its attributes, its
// nested blocks, then t.After.
func DecodeContent[T any](d *Decoder, t *Table[T], content *hcl.BodyContent, dst *T, pl Place) {
	for _, f := range t.Fields {
		a := content.Attributes[f.Name]
		if a == nil {
			continue
		}
		pl.Loc[pl.LocPrefix+f.Name] = a.Expr.Range()
		d.decodeField(a, pl.FieldPrefix+f.Name, f.Type, f.ExampleText(), f.At(dst))
	}
	for _, s := range t.Sub {
		var first *hcl.Block
		for _, b := range content.Blocks {
			if b.Type != s.Name {
				continue
			}
			if first != nil {
				d.Fail(b.DefRange, pl.FieldPrefix+s.Name, "a second %s block; the first is at %s: merge them into one", s.Name, PosString(first.DefRange))
				continue
			}
			first = b
			pl.Loc[pl.LocPrefix+s.Name] = b.DefRange
			DecodeBody(d, s, b.Body, dst, pl.Sub(s.Name))
		}
	}
	for _, n := range t.Repeated {
		for _, b := range content.Blocks {
			if b.Type == n.header().Type && len(b.Labels) == 1 {
				n.decode(d, b, dst, pl)
			}
		}
	}
	if t.After != nil {
		t.After(dst, func(name string) bool { return pl.Has(name) })
	}
}

// decodeField decodes one attribute of type typ into p.
func (d *Decoder) decodeField(a *hcl.Attribute, field string, typ Type, example string, p any) {
	var v any
	ok := false
	switch typ {
	case String, Path, Hex:
		var s string
		s, ok = d.str(a, field)
		switch {
		case !ok || typ == Path && s == "":
			return
		case typ == Path:
			s = d.path(s)
		case typ == Hex:
			s = strings.ToLower(s)
		}
		v = s
	case Bool:
		v, ok = d.boolean(a, field)
	case Int:
		v, ok = d.integer(a, field, example)
	case Size:
		v, ok = d.size(a, field)
	case Duration:
		v, ok = d.duration(a, field)
	case Strings:
		v, ok = d.strings(a, field, example)
	case Number:
		var cv cty.Value
		if cv, ok = d.value(a); !ok {
			return
		}
		n, err := convert.Convert(cv, cty.Number)
		if err != nil {
			d.Fail(a.Expr.Range(), field, "want a number like %s, got %s", example, Describe(cv))
			return
		}
		v, _ = n.AsBigFloat().Float64()
	}
	if ok && !SetValue(p, v) {
		// A table's test rules this out.
		d.Fail(a.Expr.Range(), field, "internal error: the config table puts a %T in a %T; please report it", v, p)
	}
}

// path resolves a path written in the file against the file's directory.
func (d *Decoder) path(p string) string {
	if filepath.IsAbs(p) || d.Dir == "" {
		return filepath.Clean(p)
	}
	return filepath.Join(d.Dir, p)
}

// value evaluates a literal. A null value counts as unset.
func (d *Decoder) value(a *hcl.Attribute) (cty.Value, bool) {
	v, diags := a.Expr.Value(nil)
	if d.Diags(diags) {
		return cty.NilVal, false
	}
	if v.IsNull() {
		return cty.NilVal, false
	}
	if !v.IsWhollyKnown() {
		d.Fail(a.Expr.Range(), "", "the value must be known without evaluation")
		return cty.NilVal, false
	}
	v, _ = v.Unmark()
	return v, true
}

func (d *Decoder) str(a *hcl.Attribute, field string) (string, bool) {
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
		d.Fail(a.Expr.Range(), field, "want a string, got %s; quote the value", Describe(v))
		return "", false
	}
	s, err := convert.Convert(v, cty.String)
	if err != nil {
		d.Fail(a.Expr.Range(), field, "want a string, got %s; quote the value", v.Type().FriendlyName())
		return "", false
	}
	return s.AsString(), true
}

func (d *Decoder) boolean(a *hcl.Attribute, field string) (bool, bool) {
	v, ok := d.value(a)
	if !ok {
		return false, false
	}
	b, err := convert.Convert(v, cty.Bool)
	if err != nil {
		d.Fail(a.Expr.Range(), field, "want true or false, got %s", Describe(v))
		return false, false
	}
	return b.True(), true
}

// integer decodes a whole number that fits an int. example goes into the
// message.
func (d *Decoder) integer(a *hcl.Attribute, field, example string) (int, bool) {
	v, ok := d.value(a)
	if !ok {
		return 0, false
	}
	n, err := convert.Convert(v, cty.Number)
	if err != nil {
		d.Fail(a.Expr.Range(), field, "want a whole number like %s, got %s", example, Describe(v))
		return 0, false
	}
	i, ok := wholeInt64(n.AsBigFloat())
	if !ok || int64(int(i)) != i {
		d.Fail(a.Expr.Range(), field, "want a whole number like %s, got %s", example, Describe(v))
		return 0, false
	}
	return int(i), true
}

// size decodes a byte count: a number, or a string for ParseSize.
func (d *Decoder) size(a *hcl.Attribute, field string) (int64, bool) {
	v, ok := d.value(a)
	if !ok {
		return 0, false
	}
	switch v.Type() {
	case cty.Number:
		i, ok := wholeInt64(v.AsBigFloat())
		if !ok || i < 0 {
			d.Fail(a.Expr.Range(), field, "want a non-negative whole number of bytes or a size like \"1MiB\", got %s", Describe(v))
			return 0, false
		}
		return i, true
	case cty.String:
		n, err := ParseSize(v.AsString())
		if err != nil {
			d.Fail(a.Expr.Range(), field, "%v", err)
			return 0, false
		}
		return n, true
	}
	d.Fail(a.Expr.Range(), field, "want a size like \"1MiB\" or a number of bytes, got %s", Describe(v))
	return 0, false
}

func (d *Decoder) duration(a *hcl.Attribute, field string) (time.Duration, bool) {
	v, ok := d.value(a)
	if !ok {
		return 0, false
	}
	if v.Type() != cty.String {
		d.Fail(a.Expr.Range(), field, "want a duration string like \"20us\" or \"0s\", got %s", Describe(v))
		return 0, false
	}
	t, err := time.ParseDuration(v.AsString())
	if err != nil {
		d.Fail(a.Expr.Range(), field, "%q is not a duration; write it like \"20us\", \"1ms\" or \"0s\"", v.AsString())
		return 0, false
	}
	return t, true
}

// strings decodes a list of strings; example goes into the message.
func (d *Decoder) strings(a *hcl.Attribute, field, example string) ([]string, bool) {
	v, ok := d.value(a)
	if !ok {
		return nil, false
	}
	l, err := convert.Convert(v, cty.List(cty.String))
	if err != nil || !l.IsWhollyKnown() {
		d.Fail(a.Expr.Range(), field, "want a list of strings like %s, got %s", example, Describe(v))
		return nil, false
	}
	var out []string
	for _, e := range l.AsValueSlice() {
		if e.IsNull() {
			d.Fail(a.Expr.Range(), field, "the list holds null; want strings like %s", example)
			return nil, false
		}
		out = append(out, e.AsString())
	}
	return out, true
}

func wholeInt64(f *big.Float) (int64, bool) {
	if f == nil || f.IsInf() || !f.IsInt() {
		return 0, false
	}
	i, acc := f.Int64()
	return i, acc == big.Exact
}

// Describe names a value for an error message: its literal when short.
func Describe(v cty.Value) string {
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
