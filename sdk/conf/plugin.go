package conf

import (
	"errors"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/ferrydev/ferry/sdk"
)

// Decode decodes a plugin's `config { ... }` block (cfg.Config) into dst
// by t: t's defaults, then the block's values, then the table's checks,
// each written Field's Check, and rules (nil for none) for what relates
// several settings. An empty block leaves the defaults.
//
// The block is parsed where it sits in the operator's file, so every
// error reads "file:line:col: PREFIX: setting: what is wrong", prefix
// being "tcp config"; a misspelt setting gets HCL's "did you mean". All
// errors are joined (errors.Join); each is a *Error.
func Decode[T any](cfg sdk.StartConfig, prefix string, t *Table[T], dst *T, rules func(*T, Block)) error {
	t.Defaults(dst)
	file := cfg.ConfigFile
	d := &Decoder{}
	if file != "" {
		d = NewDecoder(file)
	} else {
		file = "<plugin config>"
	}
	d.Prefix = prefix
	start := hcl.Pos{Line: max(cfg.ConfigLine, 1), Column: max(cfg.ConfigColumn, 1), Byte: max(cfg.ConfigByte, 0)}
	f, diags := hclsyntax.ParseConfig(cfg.Config, file, start)
	if d.Diags(diags) {
		return errors.Join(d.Errs...)
	}
	pl := Place{Loc: map[string]hcl.Range{"": {Filename: cfg.ConfigFile, Start: start, End: start}}, FieldPrefix: prefix + ": "}
	DecodeBody(d, t, f.Body, dst, pl)
	if len(d.Errs) == 0 {
		check(d, t, dst, pl, rules)
	}
	return errors.Join(d.Errs...)
}
