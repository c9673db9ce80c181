package host

import (
	"testing"

	"github.com/ferrydev/ferry/host/slicer"
	"github.com/ferrydev/ferry/sdk"
)

// TestPluginChanges checks the change signal failover waits on: a
// channel taken before a change is closed by it, one taken after is not.
func TestPluginChanges(t *testing.T) {
	var c pluginChanges
	c.changed() // nobody waits: nothing to wake, no panic
	before := c.Changed()
	if again := c.Changed(); again != before {
		t.Fatal("two Changed calls with no change between return different channels")
	}
	select {
	case <-before:
		t.Fatal("Changed's channel closed before any change")
	default:
	}
	c.changed()
	select {
	case <-before:
	default:
		t.Fatal("a change did not close the channel taken before it")
	}
	after := c.Changed()
	select {
	case <-after:
		t.Fatal("the channel taken after the change is closed")
	default:
	}
}

// TestCapsOf pins what capsOf derives until plugins declare slice sizes:
// tcp declares nothing, a same-machine transport (shm) prefers 64 MiB.
func TestCapsOf(t *testing.T) {
	if c := capsOf(sdk.Info{Name: "tcp"}); c != (slicer.Caps{}) {
		t.Errorf("tcp caps %+v, want none", c)
	}
	if c := capsOf(sdk.Info{Name: "shm", SameMachineOnly: true}); c != (slicer.Caps{PreferredSlice: 64 << 20}) {
		t.Errorf("shm caps %+v, want preferred 64 MiB", c)
	}
	// With the default 1 MiB slice: tcp cuts 64 MiB into 64, shm into 1.
	if p := slicer.Cut(slicer.Input{Length: 64 << 20, Configured: 1 << 20, Caps: capsOf(sdk.Info{})}); p.Slices != 64 {
		t.Errorf("tcp: %d slices of 64 MiB, want 64", p.Slices)
	}
	if p := slicer.Cut(slicer.Input{Length: 64 << 20, Configured: 1 << 20, Caps: capsOf(sdk.Info{SameMachineOnly: true})}); p.Slices != 1 {
		t.Errorf("shm: %d slices of 64 MiB, want 1", p.Slices)
	}
}
