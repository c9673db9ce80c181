package wallclock

import (
	"testing"
	"time"
)

// TestNowIsTheWallClock: Now stays between two wall clock readings around
// it, whether it anchors afresh or reads the anchor it finds.
func TestNowIsTheWallClock(t *testing.T) {
	anchor.Store(nil)
	for range 3 {
		before := time.Now().UnixNano()
		n := Now()
		after := time.Now().UnixNano()
		if n < before-int64(time.Millisecond) || n > after+int64(time.Millisecond) {
			t.Fatalf("Now() = %d, the wall clock read %d before it and %d after", n, before, after)
		}
	}
}

// TestNowReanchors: an anchor Every old is replaced by a fresh reading of
// the wall clock, and a fresher one is used as it stands (so a step of
// the wall clock reaches Now within Every).
func TestNowReanchors(t *testing.T) {
	defer anchor.Store(nil)
	hour := int64(time.Hour)
	mono := func() int64 { return int64(time.Since(epoch)) }
	// A fresh anchor an hour ahead: Now believes it. (Should the test
	// lose its CPU for Every between the store and Now, Now anchors
	// again, rightly: try again.)
	for try := 0; ; try++ {
		m := mono()
		anchor.Store(&anchored{unix: time.Now().UnixNano() + hour, mono: m})
		off := Now() - time.Now().UnixNano()
		if off > hour-int64(time.Second) && off < hour+int64(time.Second) {
			break
		}
		if mono()-m < int64(Every) || try == 9 {
			t.Fatalf("with a fresh anchor an hour ahead, Now is %v off the wall clock, want about 1h", time.Duration(off))
		}
	}
	anchor.Store(&anchored{unix: time.Now().UnixNano() + hour, mono: mono() - int64(Every)})
	if off := Now() - time.Now().UnixNano(); off > int64(time.Millisecond) || off < -int64(time.Millisecond) {
		t.Fatalf("with an anchor Every old, Now is %v off the wall clock, want it anchored again", time.Duration(off))
	}
	if a := anchor.Load(); a.unix-time.Now().UnixNano() > int64(time.Millisecond) {
		t.Fatalf("the stale anchor was not replaced (%v ahead)", time.Duration(a.unix-time.Now().UnixNano()))
	}
}

func BenchmarkNow(b *testing.B) {
	var s int64
	for b.Loop() {
		s += Now()
	}
	_ = s
}

func BenchmarkTimeNow(b *testing.B) {
	var s int64
	for b.Loop() {
		s += time.Now().UnixNano()
	}
	_ = s
}
