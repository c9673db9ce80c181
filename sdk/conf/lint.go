package conf

import (
	"fmt"
	"strings"
	"time"
)

// Lint finds the mistakes in a table that the compiler cannot see: a
// field whose Go type does not match its declared Type, a default or a
// bound of the wrong type, a setting without documentation, a name twice.
// A table's test calls it; block names the table in the problems.
func Lint[T any](block string, t *Table[T]) []string {
	var bad []string
	fail := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if t.Doc == "" {
		fail("block %q has no doc", block)
	}
	var dst T
	seen := map[string]bool{}
	for _, f := range t.Fields {
		name := block + "." + f.Name
		if seen[f.Name] {
			fail("%s is declared twice", name)
		}
		seen[f.Name] = true
		if f.Doc == "" {
			fail("%s has no doc", name)
		}
		p := f.At(&dst)
		if !fits(f.Type, p) {
			fail("%s: declared %s, lands in a %T", name, typeDoc[f.Type], p)
		}
		if f.Default != nil {
			var zero T
			if !SetValue(f.At(&zero), f.Default) {
				fail("%s: default %#v (%T) does not fit a %T", name, f.Default, f.Default, p)
			}
		}
		for _, b := range []any{f.Min, f.Max} {
			if b == nil {
				continue
			}
			if _, ok := number(b); !ok {
				fail("%s: bound %#v is not a number", name, b)
			}
			switch f.Type {
			case Int, Size, Duration, Number:
			default:
				fail("%s: a range on a %s", name, typeDoc[f.Type])
			}
		}
		if f.Lazy && f.Default == nil {
			fail("%s: lazy without a default", name)
		}
		for _, c := range f.Words {
			if c.Word == "" || strings.ContainsAny(c.Word, "\"\n") {
				fail("%s: bad word %q", name, c.Word)
			}
		}
	}
	for _, s := range t.Sub {
		bad = append(bad, Lint(block+"."+s.Name, s)...)
	}
	return bad
}

// fits reports whether p may hold a value of type typ.
func fits(typ Type, p any) bool {
	switch p.(type) {
	case *string:
		return typ == String || typ == Path || typ == Hex
	case *bool, **bool:
		return typ == Bool
	case **int:
		return typ == Int
	case *int, *int64, *uint64:
		return typ == Int || typ == Size
	case *time.Duration:
		return typ == Duration
	case *[]string:
		return typ == Strings
	case *float64:
		return typ == Number
	}
	return false
}
