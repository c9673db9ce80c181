package config

import (
	"fmt"
	"strings"
)

// reference is a block table as the reference documents it.
type reference interface {
	describe() refBlock
}

type refBlock struct {
	name, label, doc string
	many             bool
	rows             []refRow
	sub              []refBlock
	raw              []rawBlock
}

type refRow struct {
	name, typ, def, allowed, doc string
}

func (t *table[T]) describe() refBlock {
	b := refBlock{name: t.name, label: t.label, doc: t.doc, many: t.many, raw: t.raw}
	for i := range t.fields {
		f := &t.fields[i]
		r := refRow{name: f.name, typ: typeDoc[f.typ], doc: f.doc}
		switch {
		case f.required != optional:
			r.def = "required"
		case f.defDoc != "":
			r.def = f.defDoc
		case f.def != nil:
			r.def = literal(f.typ, f.def)
		}
		var allowed []string
		lo, hasLo := number(f.min)
		_, hasHi := number(f.max)
		switch {
		case hasLo && hasHi:
			allowed = append(allowed, bound(f.typ, f.min)+".."+bound(f.typ, f.max))
		case hasLo && lo == 0:
			allowed = append(allowed, "not negative")
		case hasLo:
			allowed = append(allowed, ">= "+bound(f.typ, f.min))
		case hasHi:
			allowed = append(allowed, "<= "+bound(f.typ, f.max))
		}
		for _, c := range f.words {
			w := fmt.Sprintf("%q", c.word)
			if c.doc != "" {
				w += " (" + c.doc + ")"
			}
			if c.refuse != "" {
				w += " — refused for now: " + c.refuse
			}
			allowed = append(allowed, w)
		}
		if f.only != nil {
			allowed = append(allowed, `only with kind = "`+strings.Join(f.only, `" or "`)+`"`)
		}
		r.allowed = strings.Join(allowed, "; ")
		b.rows = append(b.rows, r)
	}
	for _, s := range t.sub {
		b.sub = append(b.sub, s.describe())
	}
	return b
}

// Reference returns the reference of every setting of an engine file, in
// Markdown, generated from the tables that decode and check them.
// docs/config.md holds it; a test fails when that file is stale.
func Reference() string {
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
	writeBlock(&w, topTable.describe(), "##")
	for _, b := range blocks {
		writeBlock(&w, b.doc.describe(), "##")
	}
	return w.String()
}

func writeBlock(w *strings.Builder, b refBlock, h string) {
	switch {
	case b.name == "":
		fmt.Fprintf(w, "%s Top level\n\n", h)
	case b.label != "":
		fmt.Fprintf(w, "%s `%s \"<%s>\" { ... }`\n\n", h, b.name, b.label)
	default:
		fmt.Fprintf(w, "%s `%s { ... }`\n\n", h, b.name)
	}
	w.WriteString(b.doc)
	switch {
	case b.name == "":
	case b.many:
		w.WriteString(" Any number of these blocks.")
	default:
		w.WriteString(" At most one such block.")
	}
	w.WriteString("\n\n| Setting | Type | Default | Allowed | Description |\n|---|---|---|---|---|\n")
	for _, r := range b.rows {
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s |\n", r.name, r.typ, cell(r.def), cell(r.allowed), cell(r.doc))
	}
	w.WriteString("\n")
	for _, s := range b.sub {
		writeBlock(w, s, h+"#")
	}
	for _, r := range b.raw {
		fmt.Fprintf(w, "%s# `%s { ... }`\n\n%s\n\n", h, r.name, r.doc)
	}
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
