package progress

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/waiting"
	"github.com/ferrydev/ferry/sdk/ring"
	"golang.org/x/sys/unix"
)

// Header offsets of sdk/ring's layout (ring.go): the producer's tail and
// the consumer's head.
const (
	tailAt = 128
	headAt = 384
)

// cpuNow is the process's CPU time so far.
func cpuNow(t *testing.T) time.Duration {
	t.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBrokenCompletionRing: a plugin that writes an impossible tail into
// the completion ring breaks it; the lane must say so (RingErr, Down,
// its watcher nudged) and its reaper must stop, not poll a ring that
// reads empty and never sleeps (it spun a core until Close), and Close
// must still end it.
func TestBrokenCompletionRing(t *testing.T) {
	l, err := NewLane(3, 4, 20*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	watch := make(chan struct{}, 1)
	l.Watch(watch)
	tr := NewTracker(4)
	go l.Reap(tr)
	untilReaper(t, l, "the idle reaper sleeps", func(a waiting.Act) bool { return a == waiting.Sleep })

	binary.LittleEndian.PutUint64(l.CQ.Mem()[tailAt:], 1000) // the plugin's write
	l.cq.Wake()
	untilReaper(t, l, "the reaper stands by on the broken ring", func(a waiting.Act) bool { return a == waiting.Standby })
	if err := l.RingErr(); !errors.Is(err, ring.ErrCorrupt) {
		t.Fatalf("RingErr after a corrupt tail: %v, want ring.ErrCorrupt", err)
	}
	if !l.Down() {
		t.Error("a lane with a broken completion ring is not down")
	}
	select {
	case <-watch:
	default:
		t.Error("the watcher was not told of the broken ring")
	}
	// Standing by, it takes no CPU: spinning, it took the whole window.
	const window = 200 * time.Millisecond
	before := cpuNow(t)
	time.Sleep(window) // the interval measured, not a synchronisation
	if used := cpuNow(t) - before; used > window/2 {
		t.Errorf("the process used %v of CPU in %v beside a broken ring: its reaper spins", used, window)
	}
	if waiting.Act(l.reaperAct.Load()) != waiting.Standby {
		t.Errorf("the reaper left its stand-by: %v", waiting.Act(l.reaperAct.Load()))
	}
	if l.WaitOn(tr, func(int64) bool { return false }, nil, 0, true, false) {
		t.Error("WaitOn on a broken lane reported done")
	}
	closed := make(chan struct{})
	go func() { l.Close(true); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the reaper of a broken lane")
	}
}

// TestBrokenSubmissionRing: a plugin that writes an impossible head into
// the submission ring breaks it; a submitter waiting for room gets
// ErrLaneDown at once, not a spin until its task's deadline with the
// producer side held, and the lane says why.
func TestBrokenSubmissionRing(t *testing.T) {
	l, err := NewLane(4, 4, 20*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(false)
	l.Begin()
	defer l.End()
	for i := range 4 { // fill it: nobody consumes
		d := ring.Descriptor{Token: uint64(i + 1), Op: ring.OpNop}
		if err := l.Put(&d, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	binary.LittleEndian.PutUint64(l.SQ.Mem()[headAt:], 1000) // the plugin's write
	d := ring.Descriptor{Token: 5, Op: ring.OpNop}
	if err := l.Put(&d, nil, 0); !errors.Is(err, ErrLaneDown) {
		t.Fatalf("Put on a broken submission ring: %v, want ErrLaneDown", err)
	}
	if err := l.RingErr(); !errors.Is(err, ring.ErrCorrupt) {
		t.Errorf("RingErr after a corrupt head: %v, want ring.ErrCorrupt", err)
	}
	if !l.Down() {
		t.Error("a lane with a broken submission ring is not down")
	}
}
