package sdk

import (
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

func TestPrecheck(t *testing.T) {
	cases := []struct {
		name string
		d    ring.Descriptor
		st   ring.Status
		done bool
	}{
		{"nop", ring.Descriptor{Op: ring.OpNop}, ring.StatusOK, true},
		{"write", ring.Descriptor{Op: ring.OpWrite, Length: 1}, ring.StatusOK, false},
		{"read before deadline", ring.Descriptor{Op: ring.OpRead, Length: 1, Deadline: 101}, ring.StatusOK, false},
		{"deadline now", ring.Descriptor{Op: ring.OpRead, Length: 1, Deadline: 100}, ring.StatusTimeout, true},
		{"zero length", ring.Descriptor{Op: ring.OpWrite}, ring.StatusInvalid, true},
		{"unknown op", ring.Descriptor{Op: 42, Length: 1}, ring.StatusInvalid, true},
		{"completion op", ring.Descriptor{Op: ring.OpCompletion, Length: 1}, ring.StatusInvalid, true},
	}
	for _, c := range cases {
		if st, done := precheck(&c.d, func() int64 { return 100 }); st != c.st || done != c.done {
			t.Errorf("%s: Precheck = %v, %v; want %v, %v", c.name, st, done, c.st, c.done)
		}
	}
}
