package conf

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// Type is how a setting is written in the file.
type Type uint8

const (
	String   Type = iota // a string (a whole number passes too)
	Path                 // a string; a relative path is made absolute against the file's directory
	Hex                  // a string, lower-cased (digests)
	Bool                 // true or false
	Int                  // a whole number
	Size                 // a byte count: a number or a size string (ParseSize)
	Duration             // a Go duration string
	Strings              // a list of strings
	Number               // any number
)

// typeDoc names each Type in the reference.
var typeDoc = [...]string{
	String:   "string",
	Path:     "path",
	Hex:      "hex string",
	Bool:     "bool",
	Int:      "whole number",
	Size:     "size",
	Duration: "duration",
	Strings:  "list of strings",
	Number:   "number",
}

// Doc names t in the reference: "size", "list of strings".
func (t Type) Doc() string { return typeDoc[t] }

// Requirement says whether a setting must be written.
type Requirement uint8

const (
	Optional Requirement = iota
	// Required: the schema marks it required, so a missing attribute is
	// HCL's "Missing required argument" at the block.
	Required
	// MustSet: Check refuses an empty value, naming an example; a value
	// built in code is checked the same way.
	MustSet
)

// Choice is one word a string setting may take.
type Choice struct {
	Word string
	Doc  string
	// Refuse is why the word, though known, cannot take effect yet; a
	// setting that holds it is refused with this reason instead of being
	// accepted and ignored.
	Refuse string
}

// Field is one setting of a block whose Go struct is T.
type Field[T any] struct {
	Name     string
	Type     Type
	Doc      string
	Required Requirement
	// Default is the default in the Go type of the field; nil for none.
	// DefaultDoc replaces its rendering in the reference ("a hash of
	// /etc/machine-id") where it is not a literal.
	Default    any
	DefaultDoc string
	// Lazy: a value left out stays zero in the struct and its consumer
	// applies Default; the range check skips such a zero, as it does for
	// a field without a Default. Otherwise the decoder presets Default.
	Lazy bool
	// Example is a value as written in the file, for messages; "" uses
	// Default.
	Example string
	// Min and Max bound a number, size or duration, inclusive, in the
	// field's Go type; nil leaves that side open. Hint follows the range
	// error.
	Min, Max any
	Hint     string
	// Words are the values a string or each element of a list may take;
	// nil allows any.
	Words []Choice
	// WordsInCode: the caller checks the words, with the rules that
	// depend on them; the table only documents them.
	WordsInCode bool
	// Only names the kinds a setting is used with, for the reference
	// ("only with kind = ..."); the caller checks it.
	Only []string
	// Skip, when set and true, turns the range check off ("0s" means
	// off; 0 means no bound).
	Skip func(*T) bool
	// Check, when set, runs on a value the file wrote and that passed
	// the table's own checks; its error is reported at the value, after
	// the setting's name, and wrapped.
	Check func(*T) error
	// At returns a pointer to the Go field the value lands in: *string,
	// *bool, **bool, *int, **int, *int64, *uint64, *time.Duration,
	// *[]string or *float64, matching Type.
	At func(*T) any
}

// Table is one block: its settings and nested blocks of the same struct.
type Table[T any] struct {
	Name  string // "transfer"; "" for the top level; "match" for policy.match
	Label string // the label's name for labelled blocks ("name"), else ""
	Doc   string
	Many  bool // the block may appear any number of times
	// Fields are the block's attributes, in reference order.
	Fields []Field[T]
	// Sub are nested blocks, decoded into the same struct with their
	// name as a prefix ("match.segment").
	Sub []*Table[T]
	// Raw names nested blocks the table does not decode (a plugin's
	// config block), with their documentation.
	Raw []Raw
	// Repeated are nested labelled blocks decoded into values of their
	// own type (Repeat).
	Repeated []Nested[T]
	// After runs once the block is decoded; set says which settings the
	// file wrote ("max_size", "match.max_size").
	After func(dst *T, set func(name string) bool)
}

// Raw is a nested block handed on undecoded.
type Raw struct{ Name, Doc string }

// Schema returns the HCL schema of the table's attributes and nested
// blocks.
func (t *Table[T]) Schema() *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, f := range t.Fields {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: f.Name, Required: f.Required == Required})
	}
	for _, b := range t.Sub {
		s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: b.Name})
	}
	for _, b := range t.Raw {
		s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: b.Name})
	}
	for _, n := range t.Repeated {
		s.Blocks = append(s.Blocks, n.header())
	}
	return s
}

// Defaults presets every non-lazy default in dst.
func (t *Table[T]) Defaults(dst *T) {
	for _, f := range t.Fields {
		if f.Default != nil && !f.Lazy {
			SetValue(f.At(dst), f.Default)
		}
	}
	for _, s := range t.Sub {
		s.Defaults(dst)
	}
}

// SetValue stores v, a value in a field's Go type, through p. It reports
// false when the types do not match, which a table's test rules out. A
// whole number lands in an *int, *int64 or *uint64 where it fits.
func SetValue(p, v any) bool {
	ok := false
	switch p := p.(type) {
	case *string:
		*p, ok = v.(string)
	case *bool:
		*p, ok = v.(bool)
	case **bool:
		var b bool
		if b, ok = v.(bool); ok {
			*p = &b
		}
	case *int:
		var n int64
		if n, ok = whole(v); ok && int64(int(n)) == n {
			*p = int(n)
		}
	case **int:
		var n int
		if n, ok = v.(int); ok {
			*p = &n
		}
	case *int64:
		*p, ok = whole(v)
	case *uint64:
		if n, isU := v.(uint64); isU {
			*p, ok = n, true
		} else {
			var n int64
			if n, ok = whole(v); ok && n >= 0 {
				*p = uint64(n)
			}
		}
	case *time.Duration:
		*p, ok = v.(time.Duration)
	case *float64:
		*p, ok = v.(float64)
	case *[]string:
		var l []string
		l, ok = v.([]string)
		*p = append([]string(nil), l...)
	}
	return ok
}

// whole returns an int or int64 as an int64: a whole number decoded as
// one lands in a field of the other.
func whole(v any) (int64, bool) {
	switch v := v.(type) {
	case int:
		return int64(v), true
	case int64:
		return v, true
	}
	return 0, false
}

// ExampleText is a value for messages: the example, or the default as it
// is written in a file.
func (f *Field[T]) ExampleText() string {
	if f.Example != "" {
		return f.Example
	}
	if f.Default != nil {
		return Literal(f.Type, f.Default)
	}
	return ""
}
