package conf

import (
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2"
)

// Block is one decoded block for the rules a table cannot state: which
// settings the file wrote, and a way to report a problem at one.
type Block struct {
	d  *Decoder
	pl Place
}

// Has reports whether the file wrote the setting name.
func (b Block) Has(name string) bool { return b.pl.Has(name) }

// Fail reports a problem with the setting name, located at its value, or
// at the block when name is "" or was not written. A %w verb in format
// makes its argument the cause.
func (b Block) Fail(name, format string, args ...any) {
	field := b.pl.FieldPrefix + name
	if name == "" {
		field = trimSep(b.pl.FieldPrefix)
	}
	b.d.Fail(b.pl.where(name), field, format, args...)
}

// where is the range of the setting name, else of the block.
func (p Place) where(name string) hcl.Range {
	if r, ok := p.Loc[p.LocPrefix+name]; ok && name != "" {
		return r
	}
	return p.Loc[p.LocPrefix]
}

// trimSep cuts the separator off a field prefix: "tcp config: " is
// "tcp config".
func trimSep(prefix string) string {
	for len(prefix) > 0 && (prefix[len(prefix)-1] == ' ' || prefix[len(prefix)-1] == ':' || prefix[len(prefix)-1] == '.') {
		prefix = prefix[:len(prefix)-1]
	}
	return prefix
}

// check applies the table's checks to a decoded block, then each written
// Field's Check, then rules, each only while nothing has failed yet, so
// that one mistake is reported once.
func check[T any](d *Decoder, t *Table[T], dst *T, pl Place, rules func(*T, Block)) {
	n := len(d.Errs)
	b := Block{d: d, pl: pl}
	t.Check(dst, "", pl.Has, func(name, format string, args ...any) { b.Fail(name, format, args...) })
	for i := range t.Fields {
		f := &t.Fields[i]
		if f.Check == nil || !pl.Has(f.Name) || len(d.Errs) > n {
			continue
		}
		if err := f.Check(dst); err != nil {
			b.Fail(f.Name, "%w", err)
		}
	}
	if len(d.Errs) == n && rules != nil {
		rules(dst, b)
	}
}

// Nested is a labelled block inside a Table[T] that may repeat, each
// decoded by a table of its own into a value of its own type (Repeat).
type Nested[T any] interface {
	Describer
	header() hcl.BlockHeaderSchema
	decode(d *Decoder, b *hcl.Block, dst *T, pl Place)
}

// Repeat nests t's blocks (`fault "drop" { ... }`) in a Table[T]. Each
// is preset with t's defaults, decoded and checked; a label outside
// labels (when not nil), or used twice, is refused, and so is a setting
// whose Field.Only does not name the block's label. rules then checks
// what the table cannot and add files the value into dst. Errors name
// the block as `fault "drop"`.
func Repeat[T, U any](t *Table[U], labels []Choice, rules func(*U, string, Block), add func(dst *T, label string, u U)) Nested[T] {
	return &repeat[T, U]{t: t, labels: labels, rules: rules, add: add}
}

type repeat[T, U any] struct {
	t      *Table[U]
	labels []Choice
	rules  func(*U, string, Block)
	add    func(*T, string, U)
}

func (r *repeat[T, U]) header() hcl.BlockHeaderSchema {
	return hcl.BlockHeaderSchema{Type: r.t.Name, LabelNames: []string{r.t.Label}}
}

func (r *repeat[T, U]) Describe() Doc {
	d := r.t.Describe()
	d.Many = true
	if r.labels != nil {
		d.Doc += " The label is one of:"
		for i, c := range r.labels {
			if i > 0 {
				d.Doc += ","
			}
			d.Doc += fmt.Sprintf(" %q (%s)", c.Word, c.Doc)
		}
		d.Doc += "."
	}
	return d
}

func (r *repeat[T, U]) decode(d *Decoder, hb *hcl.Block, dst *T, pl Place) {
	label := hb.Labels[0]
	outer := Block{d: d, pl: Place{Loc: map[string]hcl.Range{"": hb.DefRange}, FieldPrefix: pl.FieldPrefix}}
	if r.labels != nil && !slices.ContainsFunc(r.labels, func(c Choice) bool { return c.Word == label }) {
		words := make([]string, len(r.labels))
		for i, c := range r.labels {
			words[i] = c.Word
		}
		outer.Fail("", "unknown %s %q; want one of %s", r.t.Name, label, OrList(words))
		return
	}
	// The parent's place records each label, so a second block with it
	// is found.
	key := pl.LocPrefix + r.t.Name + "." + label
	if first, dup := pl.Loc[key]; dup {
		outer.Fail("", "%s %q is declared twice; the first is at %s: merge them into one", r.t.Name, label, PosString(first))
		return
	}
	pl.Loc[key] = hb.DefRange
	var u U
	r.t.Defaults(&u)
	sub := Place{Loc: map[string]hcl.Range{"": hb.DefRange}, FieldPrefix: fmt.Sprintf("%s%s %q: ", pl.FieldPrefix, r.t.Name, label)}
	n := len(d.Errs)
	DecodeBody(d, r.t, hb.Body, &u, sub)
	if len(d.Errs) > n {
		return
	}
	check(d, r.t, &u, sub, func(u *U, b Block) {
		for _, f := range r.t.Fields {
			if f.Only != nil && b.Has(f.Name) && !slices.Contains(f.Only, label) {
				b.Fail(f.Name, "applies only to %s %s", r.t.Name, OrList(f.Only))
			}
		}
		if len(d.Errs) == n && r.rules != nil {
			r.rules(u, label, b)
		}
	})
	if len(d.Errs) == n {
		r.add(dst, label, u)
	}
}
