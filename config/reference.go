package config

import (
	"strings"

	"github.com/ferrydev/ferry/sdk/conf"
)

// Reference returns the reference of every setting of an engine file, in
// Markdown, generated from the tables that decode and check them.
// plugins are plugins' settings tables (tcp.Settings, ...), each
// rendered as a section of its own; config/ does not import plugins, so
// the caller (the reference test) hands them in. docs/config.md holds it;
// a test fails when that file is stale.
func Reference(plugins ...conf.Describer) string {
	var w strings.Builder
	w.WriteString(`# Engine configuration reference

<!-- Generated from config/schema.go by "go test ./config -run TestReference -update". Do not edit by hand. -->

An engine reads one HCL file (` + "`ferry run --config engine.hcl`" + `). Values are literals:
there are no variables or functions. Sizes are a byte count or a number and a unit
("4096", "64KiB", "1.5MiB", "2GB": KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB
powers of 1000). Durations are Go durations ("20us", "1ms", "5s"). Relative paths
are relative to the file's directory. Every error names file:line:column, the
setting, and what to do; all of a file's errors are reported at once.

A setting that is known but cannot take effect yet is refused, not ignored: the
"Allowed" column says which and why.

`)
	conf.Markdown(&w, topTable.Describe(), "##", "")
	for _, b := range blocks {
		conf.Markdown(&w, b.doc.Describe(), "##", "")
	}
	if len(plugins) > 0 {
		w.WriteString("## Plugin settings\n\nEach plugin decodes its own `config { ... }` block with sdk/conf, from the table rendered here, " +
			"so its errors name file:line:column in the engine's file, a misspelt setting gets \"did you mean\", and the same size and duration syntax holds.\n\n")
	}
	for _, p := range plugins {
		d := p.Describe()
		conf.Markdown(&w, d, "###", "`"+d.Name+"`")
	}
	return w.String()
}
