package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// A block's settings are declared once, in a table (schema.go): name, type,
// default, range or allowed words, documentation, and where the value lands
// in the Go struct. Decoding, defaults, range and word checks, their
// file:line:col errors and the reference (Reference, docs/config.md) are
// all read from that table, so a new block costs a struct, a table and a
// line in blocks. Rules that relate several settings (a metastore kind and
// the settings it needs, a ring depth that must be a power of two) stay in
// code beside the table, in validate.go.

// valueType is how a setting is written in the file.
type valueType uint8

const (
	tString   valueType = iota // a string (a whole number passes too)
	tPath                      // a string; a relative path is made absolute against the file's directory
	tHex                       // a string, lower-cased (digests)
	tBool                      // true or false
	tInt                       // a whole number
	tSize                      // a byte count: a number or a size string (ParseSize)
	tDuration                  // a Go duration string
	tStrings                   // a list of strings
	tNumber                    // any number
)

// typeDoc names each valueType in the reference.
var typeDoc = [...]string{
	tString:   "string",
	tPath:     "path",
	tHex:      "hex string",
	tBool:     "bool",
	tInt:      "whole number",
	tSize:     "size",
	tDuration: "duration",
	tStrings:  "list of strings",
	tNumber:   "number",
}

// requirement says whether a setting must be written.
type requirement uint8

const (
	optional requirement = iota
	// hclRequired: the schema marks it required, so a missing attribute is
	// HCL's "Missing required argument" at the block.
	hclRequired
	// mustSet: Validate refuses an empty value, naming an example; a
	// Config built in code is checked the same way.
	mustSet
)

// choice is one word a string setting may take.
type choice struct {
	word string
	doc  string
	// refuse is why the word, though known, cannot take effect yet; a
	// setting that holds it is refused with this reason instead of being
	// accepted and ignored.
	refuse string
}

// field is one setting of a block whose Go struct is T.
type field[T any] struct {
	name     string
	typ      valueType
	doc      string
	required requirement
	// def is the default in the Go type of the field; nil for none.
	// defDoc replaces its rendering in the reference ("a hash of
	// /etc/machine-id") where it is not a literal.
	def    any
	defDoc string
	// lazy: a value left out stays zero in the struct and its consumer
	// applies def (Supervise.WithDefaults, Metastore.LeaseTTL, ...); the
	// range check skips such a zero. Otherwise the decoder presets def.
	lazy bool
	// example is a value as written in the file, for messages; "" uses
	// def.
	example string
	// min and max bound a number, size or duration, inclusive, in the
	// field's Go type; nil leaves that side open. hint follows the range
	// error.
	min, max any
	hint     string
	// words are the values a string or each element of a list may take;
	// nil allows any.
	words []choice
	// wordsInCode: validate.go checks the words, with the rules that
	// depend on them (metastore.kind); the table documents them.
	wordsInCode bool
	// only names the metastore kinds a setting is used with, for the
	// reference and the "is only used with" check.
	only []string
	// skip, when set and true, turns the range check off (a supervise
	// stall_after of "0s" means off).
	skip func(*T) bool
	// at returns a pointer to the Go field the value lands in: *string,
	// *bool, **bool, *int, **int, *int64, *time.Duration, *[]string or
	// *float64, matching typ.
	at func(*T) any
}

// table is one block: its settings and nested blocks of the same struct.
type table[T any] struct {
	name  string // "transfer"; "" for the top level; "match" for policy.match
	label string // the label's name for labelled blocks ("name"), else ""
	doc   string
	many  bool // the block may appear any number of times
	// fields are the block's attributes, in reference order.
	fields []field[T]
	// sub are nested blocks, decoded into the same struct with their
	// name as a prefix ("match.segment").
	sub []*table[T]
	// raw names nested blocks the table does not decode (a plugin's
	// config block), with their documentation.
	raw []rawBlock
	// after runs once the block is decoded; set says which settings the
	// file wrote ("max_size", "match.max_size").
	after func(dst *T, set func(name string) bool)
}

// rawBlock is a nested block handed on undecoded.
type rawBlock struct{ name, doc string }

// schema returns the HCL schema of the table's attributes and nested
// blocks.
func (t *table[T]) schema() *hcl.BodySchema {
	s := &hcl.BodySchema{}
	for _, f := range t.fields {
		s.Attributes = append(s.Attributes, hcl.AttributeSchema{Name: f.name, Required: f.required == hclRequired})
	}
	for _, b := range t.sub {
		s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: b.name})
	}
	for _, b := range t.raw {
		s.Blocks = append(s.Blocks, hcl.BlockHeaderSchema{Type: b.name})
	}
	return s
}

// defaults presets every non-lazy default in dst.
func (t *table[T]) defaults(dst *T) {
	for _, f := range t.fields {
		if f.def != nil && !f.lazy {
			setValue(f.at(dst), f.def)
		}
	}
	for _, s := range t.sub {
		s.defaults(dst)
	}
}

// setValue stores v, a value in a field's Go type, through p. It reports
// false when the types do not match, which TestTables rules out for every
// table.
func setValue(p, v any) bool {
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
		*p, ok = v.(int)
	case **int:
		var n int
		if n, ok = v.(int); ok {
			*p = &n
		}
	case *int64:
		*p, ok = v.(int64)
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

// place says where a table's settings are recorded and named: loc gets
// each attribute's range under locPrefix+name, and errors name the
// setting fieldPrefix+name.
type place struct {
	loc         map[string]hcl.Range
	locPrefix   string
	fieldPrefix string
}

func (p place) sub(name string) place {
	return place{loc: p.loc, locPrefix: p.locPrefix + name + ".", fieldPrefix: p.fieldPrefix + name + "."}
}

// decodeTable decodes body into dst by t, recording locations at pl.
func decodeTable[T any](d *decoder, t *table[T], body hcl.Body, dst *T, pl place) {
	content, diags := body.Content(t.schema())
	d.diags(diags)
	decodeContent(d, t, content, dst, pl)
}

// decodeContent decodes a block's content by t: its attributes, its
// nested blocks, then t.after.
func decodeContent[T any](d *decoder, t *table[T], content *hcl.BodyContent, dst *T, pl place) {
	for _, f := range t.fields {
		a := content.Attributes[f.name]
		if a == nil {
			continue
		}
		pl.loc[pl.locPrefix+f.name] = a.Expr.Range()
		d.decodeField(a, pl.fieldPrefix+f.name, f.typ, f.exampleText(), f.at(dst))
	}
	for _, s := range t.sub {
		var first *hcl.Block
		for _, b := range content.Blocks {
			if b.Type != s.name {
				continue
			}
			if first != nil {
				d.fail(b.DefRange, pl.fieldPrefix+s.name, "a second %s block; the first is at %s: merge them into one", s.name, posString(first.DefRange))
				continue
			}
			first = b
			pl.loc[pl.locPrefix+s.name] = b.DefRange
			decodeTable(d, s, b.Body, dst, pl.sub(s.name))
		}
	}
	if t.after != nil {
		t.after(dst, func(name string) bool {
			_, ok := pl.loc[pl.locPrefix+name]
			return ok
		})
	}
}

// decodeField decodes one attribute of type typ into p.
func (d *decoder) decodeField(a *hcl.Attribute, field string, typ valueType, example string, p any) {
	var v any
	ok := false
	switch typ {
	case tString, tPath, tHex:
		var s string
		s, ok = d.str(a, field)
		switch {
		case !ok || typ == tPath && s == "":
			return
		case typ == tPath:
			s = d.path(s)
		case typ == tHex:
			s = strings.ToLower(s)
		}
		v = s
	case tBool:
		v, ok = d.boolean(a, field)
	case tInt:
		v, ok = d.integer(a, field, example)
	case tSize:
		v, ok = d.size(a, field)
	case tDuration:
		v, ok = d.duration(a, field)
	case tStrings:
		v, ok = d.strings(a, field, example)
	case tNumber:
		var cv cty.Value
		if cv, ok = d.value(a); !ok {
			return
		}
		f, err := numberValue(cv)
		if err != nil {
			d.fail(a.Expr.Range(), field, "want a number like %s, got %s", example, describe(cv))
			return
		}
		v = f
	}
	if ok && !setValue(p, v) {
		// TestTables rules this out for every table.
		d.fail(a.Expr.Range(), field, "internal error: the config table puts a %T in a %T; please report it", v, p)
	}
}

// exampleText is a value for messages: the example, or the default as it
// is written in a file.
func (f *field[T]) exampleText() string {
	if f.example != "" {
		return f.example
	}
	if f.def != nil {
		return literal(f.typ, f.def)
	}
	return ""
}

// checkTable applies the table's range, word and requirement checks to
// dst. has says whether the file wrote a setting (by name within the
// block, "match.max_size" for nested ones); fail reports a problem with a
// setting by that name.
func checkTable[T any](t *table[T], dst *T, prefix string, has func(string) bool, fail func(name, format string, args ...any)) {
	for i := range t.fields {
		f := &t.fields[i]
		name := prefix + f.name
		f.check(dst, name, has(name), func(format string, args ...any) { fail(name, format, args...) })
	}
	for _, s := range t.sub {
		checkTable(s, dst, prefix+s.name+".", has, fail)
	}
}

// check checks one setting of dst; set says whether the file wrote it.
func (f *field[T]) check(dst *T, name string, set bool, fail func(format string, args ...any)) {
	p := f.at(dst)
	if f.required == mustSet && isZero(p) {
		fail("is required: set %s = %s%s", name[strings.LastIndexByte(name, '.')+1:], f.exampleText(), f.hint)
		return
	}
	if f.words != nil && !f.wordsInCode {
		switch p := p.(type) {
		case *string:
			if *p != "" {
				f.checkWord(*p, name, fail)
			}
		case *[]string:
			for _, w := range *p {
				f.checkWord(w, name, fail)
			}
		}
	}
	if f.min == nil && f.max == nil || f.skip != nil && f.skip(dst) {
		return
	}
	v, ok := number(p)
	if !ok || f.lazy && !set && v == 0 {
		return
	}
	lo, hasLo := number(f.min)
	hi, hasHi := number(f.max)
	if (!hasLo || v >= lo) && (!hasHi || v <= hi) {
		return
	}
	got := describeValue(f.typ, p)
	switch {
	case hasLo && hasHi:
		fail("%s is outside %s..%s%s", got, bound(f.typ, f.min), bound(f.typ, f.max), f.rangeAdvice())
	case hasLo && lo == 0:
		fail("%s is negative%s", got, f.rangeAdvice())
	case hasLo:
		fail("%s is below %s%s", got, bound(f.typ, f.min), f.rangeAdvice())
	default:
		fail("%s is above %s%s", got, bound(f.typ, f.max), f.rangeAdvice())
	}
}

// rangeAdvice follows a range error: a typical value and the hint.
func (f *field[T]) rangeAdvice() string {
	if f.def == nil {
		return f.hint
	}
	return "; a typical value is " + literal(f.typ, f.def) + f.hint
}

// checkWord checks one word against f.words.
func (f *field[T]) checkWord(w, name string, fail func(format string, args ...any)) {
	for _, c := range f.words {
		if c.word != w {
			continue
		}
		if c.refuse != "" {
			fail("%q cannot take effect yet: %s; remove %s, or use %s", w, c.refuse, name[strings.LastIndexByte(name, '.')+1:], orList(f.accepted()))
		}
		return
	}
	all := make([]string, len(f.words))
	for i, c := range f.words {
		all[i] = c.word
	}
	switch {
	case f.typ == tStrings:
		fail("%q: want any of %s", w, quoteList(all))
	case len(all) == 2:
		fail("%q: want %s", w, orList(all))
	default:
		fail("%q: want one of %s", w, orList(all))
	}
}

// accepted lists the words that take effect.
func (f *field[T]) accepted() []string {
	var l []string
	for _, c := range f.words {
		if c.refuse == "" {
			l = append(l, c.word)
		}
	}
	return l
}

// orList quotes words as `"a", "b" or "c"`.
func orList(l []string) string {
	q := quoteList(l)
	if i := strings.LastIndex(q, `, "`); i >= 0 {
		q = q[:i] + " or" + q[i+1:]
	}
	return q
}

// isZero reports whether the value behind p is its type's zero: unset,
// for a setting that was not written.
func isZero(p any) bool {
	switch p := p.(type) {
	case *string:
		return *p == ""
	case *[]string:
		return len(*p) == 0
	case *bool:
		return !*p
	case **bool:
		return *p == nil
	case **int:
		return *p == nil
	}
	v, ok := number(p)
	return ok && v == 0
}

// number returns a numeric field value, or a bound, as a float64; ok is
// false for nil and for pointers to pointers that are nil.
func number(v any) (float64, bool) {
	switch v := v.(type) {
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case time.Duration:
		return float64(v), true
	case float64:
		return v, true
	case *int:
		return float64(*v), true
	case **int:
		if *v == nil {
			return 0, false
		}
		return float64(**v), true
	case *int64:
		return float64(*v), true
	case *time.Duration:
		return float64(*v), true
	case *float64:
		return *v, true
	}
	return 0, false
}

// describeValue writes a field's value for a range error: "100 bytes",
// "1s", "65".
func describeValue(typ valueType, p any) string {
	switch p := p.(type) {
	case *int64:
		if typ == tSize {
			return fmt.Sprintf("%d bytes", *p)
		}
		return strconv.FormatInt(*p, 10)
	case *time.Duration:
		return p.String()
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *int:
		return strconv.Itoa(*p)
	case **int:
		return strconv.Itoa(**p)
	}
	return fmt.Sprint(p)
}

// bound writes a range bound: sizes in their largest whole unit ("4KiB"),
// durations as Go writes them ("1h0m0s").
func bound(typ valueType, v any) string {
	switch v := v.(type) {
	case int64:
		if typ == tSize {
			return formatSize(v)
		}
		return strconv.FormatInt(v, 10)
	case time.Duration:
		return v.String()
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// literal writes a value as a file would: `"1MiB"`, `"20us"`, 4096, true,
// ["a"].
func literal(typ valueType, v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case int64:
		if typ == tSize {
			return strconv.Quote(formatSize(v))
		}
		return strconv.FormatInt(v, 10)
	case time.Duration:
		return strconv.Quote(strings.ReplaceAll(v.String(), "µs", "us"))
	case []string:
		return "[" + quoteList(v) + "]"
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// formatSize writes n in the largest unit that divides it: "4KiB", "1MiB",
// "1536KiB", "100".
func formatSize(n int64) string {
	units := []string{"", "KiB", "MiB", "GiB", "TiB"}
	u := 0
	for u < len(units)-1 && n != 0 && n%1024 == 0 {
		n /= 1024
		u++
	}
	return strconv.FormatInt(n, 10) + units[u]
}
