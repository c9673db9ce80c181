package conf

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Check applies the table's requirement, word and range checks to dst.
// has says whether the file wrote a setting (by name within the block,
// "match.max_size" for nested ones); fail reports a problem with a
// setting by that name, prefixed with prefix.
func (t *Table[T]) Check(dst *T, prefix string, has func(string) bool, fail func(name, format string, args ...any)) {
	for i := range t.Fields {
		f := &t.Fields[i]
		name := prefix + f.Name
		f.check(dst, name, has(name), func(format string, args ...any) { fail(name, format, args...) })
	}
	for _, s := range t.Sub {
		s.Check(dst, prefix+s.Name+".", has, fail)
	}
}

// check checks one setting of dst; set says whether the file wrote it.
func (f *Field[T]) check(dst *T, name string, set bool, fail func(format string, args ...any)) {
	p := f.At(dst)
	if f.Required == MustSet && IsZero(p) {
		fail("is required: set %s = %s%s", name[strings.LastIndexByte(name, '.')+1:], f.ExampleText(), f.Hint)
		return
	}
	if f.Words != nil && !f.WordsInCode {
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
	if f.Min == nil && f.Max == nil || f.Skip != nil && f.Skip(dst) {
		return
	}
	// A zero left unset is no value when the consumer applies the
	// default (Lazy) or there is none: only a written one is checked.
	v, ok := number(p)
	if !ok || (f.Lazy || f.Default == nil) && !set && v == 0 {
		return
	}
	lo, hasLo := number(f.Min)
	hi, hasHi := number(f.Max)
	if (!hasLo || v >= lo) && (!hasHi || v <= hi) {
		return
	}
	got := describeValue(f.Type, p)
	switch {
	case hasLo && hasHi:
		fail("%s is outside %s..%s%s", got, bound(f.Type, f.Min), bound(f.Type, f.Max), f.rangeAdvice())
	case hasLo && lo == 0:
		fail("%s is negative%s", got, f.rangeAdvice())
	case hasLo:
		fail("%s is below %s%s", got, bound(f.Type, f.Min), f.rangeAdvice())
	default:
		fail("%s is above %s%s", got, bound(f.Type, f.Max), f.rangeAdvice())
	}
}

// rangeAdvice follows a range error: a typical value and the hint.
func (f *Field[T]) rangeAdvice() string {
	if f.Default == nil {
		return f.Hint
	}
	return "; a typical value is " + Literal(f.Type, f.Default) + f.Hint
}

// checkWord checks one word against f.Words.
func (f *Field[T]) checkWord(w, name string, fail func(format string, args ...any)) {
	for _, c := range f.Words {
		if c.Word != w {
			continue
		}
		if c.Refuse != "" {
			fail("%q cannot take effect yet: %s; remove %s, or use %s", w, c.Refuse, name[strings.LastIndexByte(name, '.')+1:], OrList(f.accepted()))
		}
		return
	}
	all := make([]string, len(f.Words))
	for i, c := range f.Words {
		all[i] = c.Word
	}
	switch {
	case f.Type == Strings:
		fail("%q: want any of %s", w, QuoteList(all))
	case len(all) == 2:
		fail("%q: want %s", w, OrList(all))
	default:
		fail("%q: want one of %s", w, OrList(all))
	}
}

// accepted lists the words that take effect.
func (f *Field[T]) accepted() []string {
	var l []string
	for _, c := range f.Words {
		if c.Refuse == "" {
			l = append(l, c.Word)
		}
	}
	return l
}

// QuoteList quotes words as `"a", "b", "c"`; "none" for no words.
func QuoteList(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	q := make([]string, len(l))
	for i, x := range l {
		q[i] = `"` + x + `"`
	}
	return strings.Join(q, ", ")
}

// OrList quotes words as `"a", "b" or "c"`.
func OrList(l []string) string {
	q := QuoteList(l)
	if i := strings.LastIndex(q, `, "`); i >= 0 {
		q = q[:i] + " or" + q[i+1:]
	}
	return q
}

// IsZero reports whether the value behind p is its type's zero: unset,
// for a setting that was not written.
func IsZero(p any) bool {
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
	case uint64:
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
	case *uint64:
		return float64(*v), true
	case *time.Duration:
		return float64(*v), true
	case *float64:
		if math.IsNaN(*v) {
			return math.Inf(1), true // outside every range
		}
		return *v, true
	}
	return 0, false
}

// describeValue writes a field's value for a range error: "100 bytes",
// "1s", "65".
func describeValue(typ Type, p any) string {
	switch p := p.(type) {
	case *int64:
		if typ == Size {
			return fmt.Sprintf("%d bytes", *p)
		}
		return strconv.FormatInt(*p, 10)
	case *uint64:
		if typ == Size {
			return fmt.Sprintf("%d bytes", *p)
		}
		return strconv.FormatUint(*p, 10)
	case *time.Duration:
		return p.String()
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *int:
		if typ == Size {
			return fmt.Sprintf("%d bytes", *p)
		}
		return strconv.Itoa(*p)
	case **int:
		return strconv.Itoa(**p)
	}
	return fmt.Sprint(p)
}

// bound writes a range bound: sizes in their largest whole unit ("4KiB"),
// durations as Go writes them ("1h0m0s").
func bound(typ Type, v any) string {
	switch v := v.(type) {
	case int64:
		if typ == Size {
			return FormatSize(v)
		}
		return strconv.FormatInt(v, 10)
	case uint64:
		if typ == Size && v <= math.MaxInt64 {
			return FormatSize(int64(v))
		}
		return strconv.FormatUint(v, 10)
	case int:
		if typ == Size {
			return FormatSize(int64(v))
		}
		return strconv.Itoa(v)
	case time.Duration:
		return v.String()
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// Literal writes a value as a file would: `"1MiB"`, `"20us"`, 4096, true,
// ["a"].
func Literal(typ Type, v any) string {
	switch v := v.(type) {
	case string:
		return strconv.Quote(v)
	case int64, uint64, int:
		if typ == Size {
			return strconv.Quote(bound(typ, v))
		}
		return bound(typ, v)
	case time.Duration:
		return strconv.Quote(strings.ReplaceAll(v.String(), "µs", "us"))
	case []string:
		return "[" + QuoteList(v) + "]"
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return fmt.Sprint(v)
}

// FormatSize writes n in the largest unit that divides it: "4KiB",
// "1MiB", "1536KiB", "100".
func FormatSize(n int64) string {
	units := []string{"", "KiB", "MiB", "GiB", "TiB"}
	u := 0
	for u < len(units)-1 && n != 0 && n%1024 == 0 {
		n /= 1024
		u++
	}
	return strconv.FormatInt(n, 10) + units[u]
}
