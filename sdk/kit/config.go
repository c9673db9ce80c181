package kit

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
)

// Settings decodes and checks a plugin's `config { ... }` block. Every
// error it returns starts with where the value sits in the operator's
// file (file:line:col), then Prefix ("tcp config"), the attribute and
// what is wrong, and wraps the cause where there is one.
type Settings struct {
	Cfg    sdk.StartConfig
	Prefix string // "tcp config"
}

// Decode decodes the block into v (see sdk.DecodeConfig) and reports
// whether it did: false with a nil error, v left alone, when there is no
// block to decode; false with the error when the block does not decode.
func (s Settings) Decode(v any) (bool, error) {
	if len(bytes.TrimSpace(s.Cfg.Config)) == 0 {
		return false, nil
	}
	if err := sdk.DecodeConfig(s.Cfg, v); err != nil {
		return false, fmt.Errorf("%s: %w", s.Prefix, err)
	}
	return true, nil
}

// Errorf reports what is wrong with attr, whose value sits at at. A %w
// verb in format wraps its argument.
func (s Settings) Errorf(attr string, at hcl.Range, format string, args ...any) error {
	return s.At(at, "%s: %w", attr, fmt.Errorf(format, args...))
}

// At reports a problem located at at (a block's or an attribute's range;
// the zero Range: where the config block starts) that no single attribute
// names. A %w verb in format wraps its argument.
func (s Settings) At(at hcl.Range, format string, args ...any) error {
	inner := fmt.Errorf(format, args...)
	err := sdk.ConfigErrorf(s.Cfg, at, "%s: %s", s.Prefix, inner.Error())
	return &configError{msg: err.Error(), inner: inner}
}

// configError is a located message that still answers errors.Is and
// errors.As for the cause it names.
type configError struct {
	msg   string
	inner error
}

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return e.inner }

// Int sets *into to *v when v is set and within lo..hi.
func (s Settings) Int(attr string, v *int, at hcl.Range, lo, hi int, into *int) error {
	if v == nil {
		return nil
	}
	if *v < lo || *v > hi {
		return s.Errorf(attr, at, "%d is outside %d..%d", *v, lo, hi)
	}
	*into = *v
	return nil
}

// Duration sets *into to the duration *v ("30s") when v is set and within
// lo..hi.
func (s Settings) Duration(attr string, v *string, at hcl.Range, lo, hi time.Duration, into *time.Duration) error {
	if v == nil {
		return nil
	}
	d, err := time.ParseDuration(*v)
	if err != nil {
		return s.Errorf(attr, at, "%w", err)
	}
	if d < lo || d > hi {
		return s.Errorf(attr, at, "%s is outside %s..%s", d, shortDuration(lo), shortDuration(hi))
	}
	*into = d
	return nil
}

// Size sets *into to the size *v ("64MiB", see ParseSize) when v is set;
// a size over limit is refused as too large.
func (s Settings) Size(attr string, v *string, at hcl.Range, limit uint64, into *uint64) error {
	if v == nil {
		return nil
	}
	n, err := ParseSize(*v, limit)
	if err != nil {
		return s.Errorf(attr, at, "%w", err)
	}
	*into = n
	return nil
}

// shortDuration writes d as an operator would: "1h", "1m", not "1h0m0s".
func shortDuration(d time.Duration) string {
	t := d.String()
	if strings.HasSuffix(t, "m0s") {
		t = strings.TrimSuffix(t, "0s")
	}
	if strings.HasSuffix(t, "h0m") {
		t = strings.TrimSuffix(t, "0m")
	}
	return t
}

// ParseSize reads "4096", "512KiB", "64MiB", "1GiB" (powers of two) or
// "64MB", "1GB", "1kB" (powers of ten). A size over limit is too large.
func ParseSize(s string, limit uint64) (uint64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   uint64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
		{"B", 1},
	}
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (KiB, MiB, GiB, kB, MB, GB)", s)
	}
	if n > limit/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}

// EngineSecret is the engine's cluster secret from cfg (StartConfig's
// ClusterSecret), copied, or nil when it has none (or one shorter than
// MinSecretLen): the secret a plugin uses when its own block names none,
// so that a cluster sets its secret once.
func EngineSecret(cfg sdk.StartConfig) []byte {
	if len(cfg.ClusterSecret) < MinSecretLen {
		return nil
	}
	return append([]byte(nil), cfg.ClusterSecret...)
}
