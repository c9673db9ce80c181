package enum

import "strconv"

// Value is what an enumeration is built on.
type Value interface {
	~uint8 | ~uint16 | ~uint32 | ~int | ~int32
}

// String returns names[v], the text form of v, or kind(v) (as
// "verdict(7)") when v is past the table or its entry is empty: a value
// no constant declares still prints as a number rather than as nothing.
func String[T Value](v T, names []string, kind string) string {
	if v >= 0 && uint64(v) < uint64(len(names)) && names[v] != "" {
		return names[v]
	}
	return kind + "(" + strconv.FormatInt(int64(v), 10) + ")"
}
