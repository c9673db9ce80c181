package config

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

var rootSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "name"}, // required; Validate says so with a better message
		{Name: "machine_id"},
		{Name: "plugin_dir"},
	},
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "metastore"},
		{Type: "control"},
		{Type: "plugin", LabelNames: []string{"name"}},
		{Type: "transfer"},
		{Type: "supervise"},
		{Type: "policy", LabelNames: []string{"name"}},
		{Type: "rail", LabelNames: []string{"name"}},
	},
}

var metastoreSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "kind"}, {Name: "listen"}, {Name: "url"},
		{Name: "address"}, {Name: "endpoints"}, {Name: "username"}, {Name: "password"},
		{Name: "database"}, {Name: "tls"}, {Name: "ca_file"}, {Name: "ttl"}, {Name: "prefix"},
	},
}

var controlSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "listen"}},
}

var pluginSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "path"}, {Name: "sha256"}, {Name: "enabled"}},
	Blocks:     []hcl.BlockHeaderSchema{{Type: "config"}},
}

var transferSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "slice_size"}, {Name: "ring_depth"}, {Name: "spin"}, {Name: "spin_small"}, {Name: "lanes"}, {Name: "attempts"},
	},
}

var superviseSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "stall_after"}, {Name: "probe_timeout"}, {Name: "interval"},
	},
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
		Metastore: Metastore{Kind: MetastoreEmbedded},
		Control:   Control{Listen: DefaultControlListen},
		Transfer:  defaultTransfer(),
		File:      d.file,
		loc:       map[string]hcl.Range{"": {Filename: d.file, Start: hcl.InitialPos, End: hcl.InitialPos}},
	}
	content, diags := body.Content(rootSchema)
	d.diags(diags)

	attrs := content.Attributes
	if a := attrs["name"]; a != nil {
		c.loc["name"] = a.Expr.Range()
		c.Name, _ = d.str(a, "name")
	}
	if a := attrs["machine_id"]; a != nil {
		c.loc["machine_id"] = a.Expr.Range()
		c.MachineID, _ = d.str(a, "machine_id")
	}
	if c.MachineID == "" {
		c.MachineID = DefaultMachineID()
	}
	if a := attrs["plugin_dir"]; a != nil {
		c.loc["plugin_dir"] = a.Expr.Range()
		if dir, ok := d.str(a, "plugin_dir"); ok && dir != "" {
			c.PluginDir = d.path(dir)
		}
	}

	seen := map[string]hcl.Range{}
	once := func(b *hcl.Block) bool {
		if first, dup := seen[b.Type]; dup {
			d.fail(b.DefRange, b.Type, "a second %s block; the first is at %s: merge them into one", b.Type, posString(first))
			return false
		}
		seen[b.Type] = b.DefRange
		return true
	}
	for _, b := range content.Blocks {
		switch b.Type {
		case "metastore":
			if once(b) {
				d.decodeMetastore(c, b)
			}
		case "transfer":
			if once(b) {
				d.decodeTransfer(c, b)
			}
		case "control":
			if once(b) {
				d.decodeControl(c, b)
			}
		case "supervise":
			if once(b) {
				d.decodeSupervise(c, b)
			}
		case "plugin":
			if p, ok := d.decodePlugin(b); ok {
				c.Plugins = append(c.Plugins, p)
			}
		case "policy":
			if p, ok := d.decodePolicy(b); ok {
				c.Policies = append(c.Policies, p)
			}
		case "rail":
			if r, ok := d.decodeRail(b); ok {
				c.Rails = append(c.Rails, r)
			}
		}
	}
	if c.Metastore.Kind == MetastoreEmbedded && c.Metastore.Listen == "" && !c.has("metastore.listen") {
		c.Metastore.Listen = DefaultMetastoreListen
	}
	return c
}

func (d *decoder) decodeMetastore(c *Config, b *hcl.Block) {
	c.loc["metastore"] = b.DefRange
	content, diags := b.Body.Content(metastoreSchema)
	d.diags(diags)
	m := &c.Metastore
	for name, field := range map[string]*string{
		"kind":     &m.Kind,
		"listen":   &m.Listen,
		"url":      &m.URL,
		"address":  &m.Address,
		"username": &m.Username,
		"password": &m.Password,
		"prefix":   &m.Prefix,
	} {
		if a := content.Attributes[name]; a != nil {
			c.loc["metastore."+name] = a.Expr.Range()
			if s, ok := d.str(a, "metastore."+name); ok {
				*field = s
			}
		}
	}
	if a := content.Attributes["ca_file"]; a != nil {
		c.loc["metastore.ca_file"] = a.Expr.Range()
		if s, ok := d.str(a, "metastore.ca_file"); ok && s != "" {
			m.CAFile = d.path(s)
		}
	}
	if a := content.Attributes["database"]; a != nil {
		c.loc["metastore.database"] = a.Expr.Range()
		if n, ok := d.integer(a, "metastore.database", "0"); ok {
			m.Database = n
		}
	}
	if a := content.Attributes["tls"]; a != nil {
		c.loc["metastore.tls"] = a.Expr.Range()
		if v, ok := d.boolean(a, "metastore.tls"); ok {
			m.TLS = v
		}
	}
	if a := content.Attributes["ttl"]; a != nil {
		c.loc["metastore.ttl"] = a.Expr.Range()
		if v, ok := d.duration(a, "metastore.ttl"); ok {
			m.TTL = v
		}
	}
	if a := content.Attributes["endpoints"]; a != nil {
		c.loc["metastore.endpoints"] = a.Expr.Range()
		if l, ok := d.strings(a, "metastore.endpoints", `["http://10.0.0.1:2379"]`); ok {
			m.Endpoints = l
		}
	}
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

func (d *decoder) decodeControl(c *Config, b *hcl.Block) {
	c.loc["control"] = b.DefRange
	content, diags := b.Body.Content(controlSchema)
	d.diags(diags)
	if a := content.Attributes["listen"]; a != nil {
		c.loc["control.listen"] = a.Expr.Range()
		if s, ok := d.str(a, "control.listen"); ok {
			c.Control.Listen = s
		}
	}
}

func (d *decoder) decodeTransfer(c *Config, b *hcl.Block) {
	c.loc["transfer"] = b.DefRange
	content, diags := b.Body.Content(transferSchema)
	d.diags(diags)
	t := &c.Transfer
	if a := content.Attributes["slice_size"]; a != nil {
		c.loc["transfer.slice_size"] = a.Expr.Range()
		if n, ok := d.size(a, "transfer.slice_size"); ok {
			t.SliceSize = n
		}
	}
	if a := content.Attributes["ring_depth"]; a != nil {
		c.loc["transfer.ring_depth"] = a.Expr.Range()
		if n, ok := d.integer(a, "transfer.ring_depth", "4096"); ok {
			t.RingDepth = n
		}
	}
	if a := content.Attributes["spin"]; a != nil {
		c.loc["transfer.spin"] = a.Expr.Range()
		if v, ok := d.duration(a, "transfer.spin"); ok {
			t.Spin = v
		}
	}
	if a := content.Attributes["spin_small"]; a != nil {
		c.loc["transfer.spin_small"] = a.Expr.Range()
		if v, ok := d.duration(a, "transfer.spin_small"); ok {
			t.SpinSmall = v
		}
	}
	if a := content.Attributes["lanes"]; a != nil {
		c.loc["transfer.lanes"] = a.Expr.Range()
		if n, ok := d.integer(a, "transfer.lanes", "1"); ok {
			t.Lanes = n
		}
	}
	if a := content.Attributes["attempts"]; a != nil {
		c.loc["transfer.attempts"] = a.Expr.Range()
		if n, ok := d.integer(a, "transfer.attempts", "3"); ok {
			t.Attempts = n
		}
	}
}

func (d *decoder) decodeSupervise(c *Config, b *hcl.Block) {
	c.loc["supervise"] = b.DefRange
	content, diags := b.Body.Content(superviseSchema)
	d.diags(diags)
	sv := &c.Supervise
	if a := content.Attributes["stall_after"]; a != nil {
		c.loc["supervise.stall_after"] = a.Expr.Range()
		if v, ok := d.duration(a, "supervise.stall_after"); ok {
			sv.StallAfter = v
			sv.Off = v == 0
		}
	}
	for name, field := range map[string]*time.Duration{"probe_timeout": &sv.ProbeTimeout, "interval": &sv.Interval} {
		if a := content.Attributes[name]; a != nil {
			c.loc["supervise."+name] = a.Expr.Range()
			if v, ok := d.duration(a, "supervise."+name); ok {
				*field = v
			}
		}
	}
}

func (d *decoder) decodePlugin(b *hcl.Block) (Plugin, bool) {
	if len(b.Labels) != 1 {
		return Plugin{}, false // Content has reported it
	}
	p := Plugin{
		Name:      b.Labels[0],
		Enabled:   true,
		DeclRange: posString(b.DefRange),
		loc:       map[string]hcl.Range{"": b.DefRange, "name": b.LabelRanges[0]},
	}
	field := "plugin." + p.Name
	content, diags := b.Body.Content(pluginSchema)
	d.diags(diags)
	if a := content.Attributes["path"]; a != nil {
		p.loc["path"] = a.Expr.Range()
		if s, ok := d.str(a, field+".path"); ok && s != "" {
			p.Path = d.path(s)
		}
	}
	if a := content.Attributes["sha256"]; a != nil {
		p.loc["sha256"] = a.Expr.Range()
		if s, ok := d.str(a, field+".sha256"); ok {
			p.SHA256 = strings.ToLower(s)
		}
	}
	if a := content.Attributes["enabled"]; a != nil {
		p.loc["enabled"] = a.Expr.Range()
		if v, ok := d.boolean(a, field+".enabled"); ok {
			p.Enabled = v
		}
	}

	// The config block's text is cut from the source between its braces,
	// which only the native-syntax block records.
	sb, _ := b.Body.(*hclsyntax.Body)
	if sb == nil {
		return p, true
	}
	var first *hclsyntax.Block
	for _, cb := range sb.Blocks {
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
	return p, true
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
