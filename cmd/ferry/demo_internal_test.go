package main

import (
	"testing"
	"time"
)

// TestRateText: the demo's rates keep three significant digits from a
// byte to gigabytes a second, in the unit that shows them.
func TestRateText(t *testing.T) {
	for _, c := range []struct {
		n    uint64
		d    time.Duration
		want string
	}{
		{1, 22 * time.Microsecond, "45.5 kB/s"},
		{7, time.Second, "7.00 B/s"},
		{4099, 40 * time.Microsecond, "102 MB/s"},
		{64 << 20, 20 * time.Millisecond, "3.36 GB/s"},
		{999_700, time.Second, "1.00 MB/s"},
		{1, 0, "n/a"},
	} {
		if got := rateText(c.n, c.d); got != c.want {
			t.Errorf("rateText(%d, %s) = %q, want %q", c.n, c.d, got, c.want)
		}
	}
}
