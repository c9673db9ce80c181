package kit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
)

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit uint64
		want  uint64
		err   string
	}{
		{"4096", 1 << 40, 4096, ""},
		{" 512KiB ", 1 << 40, 512 << 10, ""},
		{"64 MiB", 1 << 40, 64 << 20, ""},
		{"1GiB", 1 << 40, 1 << 30, ""},
		{"1kB", 1 << 40, 1000, ""},
		{"64MB", 1 << 40, 64e6, ""},
		{"7B", 1 << 40, 7, ""},
		{"1024GiB", 1 << 40, 1 << 40, ""},
		{"1025GiB", 1 << 40, 0, `size "1025GiB" is too large`},
		{"1025GiB", 1 << 63, 1025 << 30, ""},
		{"-1", 1 << 40, 0, `size "-1": want a number of bytes`},
		{"1TiB", 1 << 40, 0, `size "1TiB": want a number of bytes`},
	} {
		got, err := kit.ParseSize(tc.in, tc.limit)
		switch {
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		case tc.err != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.err)):
			t.Errorf("ParseSize(%q) error %v, want %q...", tc.in, err, tc.err)
		}
	}
}

type block struct {
	N      *int      `hcl:"n,optional"`
	NRange hcl.Range `hcl:"n,attr_value_range"`
}

func settings(body string) kit.Settings {
	return kit.Settings{Cfg: sdk.StartConfig{Config: []byte(body), ConfigFile: "op.hcl", ConfigLine: 10, ConfigColumn: 3}, Prefix: "mine config"}
}

// at is where an attribute's value sits in op.hcl.
func at(line, col int) hcl.Range {
	return hcl.Range{Filename: "op.hcl", Start: hcl.Pos{Line: line, Column: col}}
}

func TestSettingsDecode(t *testing.T) {
	var b block
	if ok, err := settings("  \n").Decode(&b); ok || err != nil || b.N != nil {
		t.Fatalf("empty body: %v %v", ok, err)
	}
	_, err := settings("nope = 1").Decode(&b)
	if err == nil || !strings.HasPrefix(err.Error(), "mine config: op.hcl:10:3: Unsupported argument") {
		t.Fatalf("unknown attribute: %v", err)
	}
	if ok, err := settings("\nn = 70").Decode(&b); !ok || err != nil || *b.N != 70 {
		t.Fatalf("decode: %v %v", ok, err)
	}
	// The range DecodeConfig leaves is what the checks point at.
	n := 1
	wantErr(t, settings("").Int("n", b.N, b.NRange, 1, 64, &n), "op.hcl:11:5: mine config: n: 70 is outside 1..64")
}

func TestSettingsChecks(t *testing.T) {
	s := settings("")
	str := func(v string) *string { return &v }
	num := func(v int) *int { return &v }
	n, d, size := 1, time.Second, uint64(1)
	wantErr(t, s.Int("n", num(0), at(4, 7), 1, 64, &n), "op.hcl:4:7: mine config: n: 0 is outside 1..64")
	wantErr(t, s.Duration("d", str("2h"), at(5, 5), time.Millisecond, time.Hour, &d), "op.hcl:5:5: mine config: d: 2h0m0s is outside 1ms..1h")
	wantErr(t, s.Duration("d", str("2m"), hcl.Range{}, time.Millisecond, time.Minute, &d), "op.hcl:10:3: mine config: d: 2m0s is outside 1ms..1m")
	err := s.Duration("d", str("x"), hcl.Range{}, time.Millisecond, time.Minute, &d)
	wantErr(t, err, `op.hcl:10:3: mine config: d: time: invalid duration "x"`)
	if errors.Unwrap(err) == nil {
		t.Fatal("the duration error wraps nothing")
	}
	err = s.Size("s", str("9x"), at(6, 5), 1<<40, &size)
	wantErr(t, err, `op.hcl:6:5: mine config: s: size "9x": want a number of bytes with an optional unit (KiB, MiB, GiB, kB, MB, GB)`)
	if errors.Unwrap(err) == nil {
		t.Fatal("the size error wraps nothing")
	}
	if n != 1 || d != time.Second || size != 1 {
		t.Fatalf("a refused value was stored: %d %s %d", n, d, size)
	}
	if err := errors.Join(s.Int("n", num(64), at(4, 7), 1, 64, &n), s.Duration("d", str("90s"), at(5, 5), time.Millisecond, time.Hour, &d),
		s.Size("s", str("2MiB"), at(6, 5), 1<<40, &size)); err != nil {
		t.Fatal(err)
	}
	if n != 64 || d != 90*time.Second || size != 2<<20 {
		t.Fatalf("got %d %s %d", n, d, size)
	}
	if err := s.Int("n", nil, hcl.Range{}, 1, 2, &n); err != nil || n != 64 {
		t.Fatalf("unset attribute: %v, %d", err, n)
	}
	cause := errors.New("cause")
	err = s.At(at(7, 1), "block: %w", cause)
	wantErr(t, err, "op.hcl:7:1: mine config: block: cause")
	if !errors.Is(err, cause) {
		t.Fatal("At does not wrap its cause")
	}
	if err := (kit.Settings{Prefix: "p"}).Errorf("a", hcl.Range{}, "bad"); err == nil || err.Error() != "p: a: bad" {
		t.Fatalf("no file known: %v", err)
	}
}
