// Package conf declares HCL settings by table and decodes, checks and
// documents them from that table: the one mechanism behind the engine's
// file (config/) and every plugin's `config { ... }` block.
//
// A block's settings are declared once, in a Table: name, type, default,
// range or allowed words, documentation, and where the value lands in the
// Go struct. Decoding, defaults, range and word checks, their
// file:line:col errors, "did you mean" for a misspelt name (HCL's, from
// the table's schema) and the Markdown reference (docs/config.md) are all
// read from that table, so a new setting is one row. Rules that relate
// several settings stay in code beside the table: a Field's Check, a
// Table's After, or the caller's own validation.
//
// A plugin calls Decode with its sdk.StartConfig: the block is parsed at
// its place in the operator's file, so every error points there.
//
// The package must not import the host (config/, host/, cmd/): plugins
// build from sdk/ alone.
package conf
