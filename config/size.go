package config

import "github.com/ferrydev/ferry/sdk/conf"

// ParseSize parses a byte size: a non-negative number, optionally with a
// decimal fraction, then optionally a unit: B, KiB, MiB, GiB, TiB (powers of
// 1024) or KB, MB, GB, TB (powers of 1000). Units are case-insensitive and
// may follow a space. A fraction is allowed when the result is a whole
// number of bytes: "1.5MiB" is 1572864, "0.1KiB" is an error. Examples:
// "4096", "4KiB", "64 MiB", "1GiB", "1.5MiB", "2GB". It is conf.ParseSize,
// which plugins' settings use too.
func ParseSize(s string) (int64, error) { return conf.ParseSize(s) }
