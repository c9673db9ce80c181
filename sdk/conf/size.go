package conf

import (
	"fmt"
	"math/big"
	"strings"
)

// sizeUnits maps a unit, lower-cased, to its multiplier. KiB, MiB, GiB and
// TiB are powers of 1024; KB, MB, GB and TB are powers of 1000, as in SI and
// the IEC standard. There are no one-letter units ("4K"): they are ambiguous.
var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"kib": 1 << 10,
	"mib": 1 << 20,
	"gib": 1 << 30,
	"tib": 1 << 40,
	"kb":  1e3,
	"mb":  1e6,
	"gb":  1e9,
	"tb":  1e12,
}

const sizeHelp = `write a byte count or a number and a unit, like 4096, "64KiB", "1.5MiB" or "2GB" (KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB powers of 1000)`

// ParseSize parses a byte size: a non-negative number, optionally with a
// decimal fraction, then optionally a unit: B, KiB, MiB, GiB, TiB (powers of
// 1024) or KB, MB, GB, TB (powers of 1000). Units are case-insensitive and
// may follow a space. A fraction is allowed when the result is a whole
// number of bytes: "1.5MiB" is 1572864, "0.1KiB" is an error. Examples:
// "4096", "4KiB", "64 MiB", "1GiB", "1.5MiB", "2GB".
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	dots := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		if t[i] == '.' {
			dots++
		}
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	switch {
	case t == "":
		return 0, fmt.Errorf("empty size: %s", sizeHelp)
	case num == "" || num == "." || dots > 1:
		return 0, fmt.Errorf("invalid size %q: %s", s, sizeHelp)
	case len(num) > 40:
		return 0, fmt.Errorf("invalid size %q: the number is too long", s)
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q; %s", s, unit, sizeHelp)
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok {
		return 0, fmt.Errorf("invalid size %q: %s", s, sizeHelp)
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, fmt.Errorf("invalid size %q: not a whole number of bytes", s)
	}
	if !r.Num().IsInt64() {
		return 0, fmt.Errorf("invalid size %q: larger than %d bytes", s, int64(1<<63-1))
	}
	return r.Num().Int64(), nil
}
