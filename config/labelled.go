package config

import (
	"fmt"

	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/hashicorp/hcl/v2"
)

// labelled is what the labelled blocks (plugin, policy, rail) share for
// their errors: the block's kind and label, where it was declared, and
// where each of its attributes was written.
type labelled struct {
	kind string // "plugin"
	name string // the label
	decl string // "file:line:col" of the block, or what stands in for it
	loc  map[string]hcl.Range
}

// newLabelled records a decoded block: loc[""] is the block, loc["name"]
// its label.
func newLabelled(kind string, b *hcl.Block) labelled {
	return labelled{kind: kind, name: b.Labels[0], decl: conf.PosString(b.DefRange),
		loc: map[string]hcl.Range{"": b.DefRange, "name": b.LabelRanges[0]}}
}

func (l labelled) has(attr string) bool {
	_, ok := l.loc[attr]
	return ok
}

// errorAt locates an error at attribute attr ("path", "match.max_size"),
// else at the block. A block built in code has no locations; its
// declaration, if set, stands in for the file.
func (l labelled) errorAt(attr, field, format string, args ...any) *Error {
	if r, ok := l.loc[attr]; ok {
		return conf.ErrorAt(r, field, format, args...)
	}
	if r, ok := l.loc[""]; ok {
		return conf.ErrorAt(r, field, format, args...)
	}
	return &Error{File: l.decl, Field: field, Msg: fmt.Sprintf(format, args...)}
}

// failer returns a fail function that adds to errs an error about
// attribute attr ("" or "name": the block itself), named as in the file:
// "policy.kv.match.max_size".
func (l labelled) failer(errs *[]error) func(attr, format string, args ...any) {
	return func(attr, format string, args ...any) {
		field := l.kind + "." + l.name
		if attr != "" && attr != "name" {
			field += "." + attr
		}
		*errs = append(*errs, l.errorAt(attr, field, format, args...))
	}
}

// checkIdentity checks the label (what names may be, plus note) and that
// no earlier block of the kind has it: first maps labels to the
// declaration of the first block that had them.
func (l labelled) checkIdentity(fail func(attr, format string, args ...any), first map[string]string, note, twice string) {
	if !pluginName.MatchString(l.name) {
		fail("name", "%s name %q must be 1 to 63 lower-case letters, digits, '-' or '_', starting with a letter or digit%s", l.kind, l.name, note)
	}
	if decl, dup := first[l.name]; dup {
		fail("", "%s %q is declared twice; the first is at %s: %s", l.kind, l.name, decl, twice)
	} else {
		first[l.name] = l.decl
	}
}

// many is a labelled block that may repeat. start builds the Go value from
// the label and locations; add files the decoded value into Config (and
// does what the table does not, like cutting a plugin's config body).
func many[T any](t *conf.Table[T], start func(l labelled) T, add func(d *decoder, c *Config, b *hcl.Block, v T)) block {
	return block{
		header: hcl.BlockHeaderSchema{Type: t.Name, LabelNames: []string{t.Label}},
		doc:    t,
		decode: func(d *decoder, c *Config, b *hcl.Block) {
			if len(b.Labels) != 1 {
				return // Content has reported it
			}
			l := newLabelled(t.Name, b)
			v := start(l)
			t.Defaults(&v)
			conf.DecodeBody(d.Decoder, t, b.Body, &v, conf.Place{Loc: l.loc, FieldPrefix: l.kind + "." + l.name + "."})
			add(d, c, b, v)
		},
	}
}
