package conf

import (
	"fmt"
	"strings"
)

// Describer is a block as the reference documents it: a Table, or a
// caller's block that adds nested tables to one.
type Describer interface {
	Describe() Doc
}

// Doc is a block documented: its rows and nested blocks.
type Doc struct {
	Name, Label, Doc string
	Many             bool
	Rows             []Row
	Sub              []Doc
	Raw              []Raw
}

// Row is one setting documented.
type Row struct {
	Name, Type, Default, Allowed, Doc string
}

// Describe documents the table.
func (t *Table[T]) Describe() Doc {
	b := Doc{Name: t.Name, Label: t.Label, Doc: t.Doc, Many: t.Many, Raw: t.Raw}
	for i := range t.Fields {
		f := &t.Fields[i]
		r := Row{Name: f.Name, Type: typeDoc[f.Type], Doc: f.Doc}
		switch {
		case f.Required != Optional:
			r.Default = "required"
		case f.DefaultDoc != "":
			r.Default = f.DefaultDoc
		case f.Default != nil:
			r.Default = Literal(f.Type, f.Default)
		}
		var allowed []string
		lo, hasLo := number(f.Min)
		_, hasHi := number(f.Max)
		switch {
		case hasLo && hasHi:
			allowed = append(allowed, bound(f.Type, f.Min)+".."+bound(f.Type, f.Max))
		case hasLo && lo == 0:
			allowed = append(allowed, "not negative")
		case hasLo:
			allowed = append(allowed, ">= "+bound(f.Type, f.Min))
		case hasHi:
			allowed = append(allowed, "<= "+bound(f.Type, f.Max))
		}
		for _, c := range f.Words {
			w := fmt.Sprintf("%q", c.Word)
			if c.Doc != "" {
				w += " (" + c.Doc + ")"
			}
			if c.Refuse != "" {
				w += " — refused for now: " + c.Refuse
			}
			allowed = append(allowed, w)
		}
		if f.Only != nil {
			allowed = append(allowed, `only with kind = "`+strings.Join(f.Only, `" or "`)+`"`)
		}
		r.Allowed = strings.Join(allowed, "; ")
		b.Rows = append(b.Rows, r)
	}
	for _, s := range t.Sub {
		b.Sub = append(b.Sub, s.Describe())
	}
	for _, n := range t.Repeated {
		b.Sub = append(b.Sub, n.Describe())
	}
	return b
}

// Markdown writes b, under a heading of level h ("##"), and its nested
// blocks one level deeper: a paragraph and a table of its settings.
// title, when not "", replaces the heading's text.
func Markdown(w *strings.Builder, b Doc, h, title string) {
	switch {
	case title != "":
		fmt.Fprintf(w, "%s %s\n\n", h, title)
	case b.Name == "":
		fmt.Fprintf(w, "%s Top level\n\n", h)
	case b.Label != "":
		fmt.Fprintf(w, "%s `%s \"<%s>\" { ... }`\n\n", h, b.Name, b.Label)
	default:
		fmt.Fprintf(w, "%s `%s { ... }`\n\n", h, b.Name)
	}
	w.WriteString(b.Doc)
	switch {
	case b.Name == "":
	case b.Many:
		w.WriteString(" Any number of these blocks.")
	default:
		w.WriteString(" At most one such block.")
	}
	w.WriteString("\n\n")
	if len(b.Rows) > 0 {
		w.WriteString("| Setting | Type | Default | Allowed | Description |\n|---|---|---|---|---|\n")
		for _, r := range b.Rows {
			fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s |\n", r.Name, r.Type, cell(r.Default), cell(r.Allowed), cell(r.Doc))
		}
		w.WriteString("\n")
	}
	for _, s := range b.Sub {
		Markdown(w, s, h+"#", "")
	}
	for _, r := range b.Raw {
		fmt.Fprintf(w, "%s# `%s { ... }`\n\n%s\n\n", h, r.Name, r.Doc)
	}
}

// cell escapes text for a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
