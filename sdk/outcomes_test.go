package sdk

import (
	"reflect"
	"testing"

	"github.com/ferrydev/ferry/sdk/ring"
)

type recorder struct{ got []ring.Status }

func (r *recorder) Complete(_ uint64, st ring.Status, _ uint64) { r.got = append(r.got, st) }

func TestOutcomes(t *testing.T) {
	var o Outcomes
	var c recorder
	ok := ring.Descriptor{Op: ring.OpWrite, Length: 1}
	if !o.Admit(&ok, &c, false) || len(c.got) != 0 {
		t.Fatalf("a good descriptor was not admitted: %v", c.got)
	}
	for _, d := range []ring.Descriptor{
		{Op: ring.OpNop},
		{Op: ring.OpWrite},                        // zero length
		{Op: ring.OpRead, Length: 1, Deadline: 1}, // deadline long passed
		{Op: ring.Op(99), Length: 1},              // unknown op
	} {
		if o.Admit(&d, &c, false) {
			t.Fatalf("%+v admitted", d)
		}
	}
	if o.Admit(&ok, &c, true) {
		t.Fatal("a stopped transport admitted a descriptor")
	}
	o.Count(ring.StatusOK)
	o.Count(ring.StatusPeerUnreachable)
	want := []ring.Status{ring.StatusOK, ring.StatusInvalid, ring.StatusTimeout, ring.StatusInvalid, ring.StatusShutdown}
	if !reflect.DeepEqual(c.got, want) {
		t.Fatalf("completions %v, want %v", c.got, want)
	}
	m := map[string]uint64{}
	o.Export(m)
	if w := map[string]uint64{"ops_completed": 2, "ops_failed": 5, "ops_timed_out": 1}; !reflect.DeepEqual(m, w) {
		t.Fatalf("counters %v, want %v", m, w)
	}
}
