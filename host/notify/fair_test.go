package notify

import (
	"errors"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/control"
)

// TestFairBuffer drives the buffer with plain data and a simulated clock:
// a sender alone may fill it; a sender refused for want of room shares it
// from then on, so the flooder is refused the slots the reader frees and
// the other sender gets them; the share lapses after WaitMemory.
func TestFairBuffer(t *testing.T) {
	f := newFairBuffer(4)
	t0 := time.Unix(1000, 0)
	put := func(from string, at time.Time) error { return f.put(Notification{From: from, Name: "n"}, at) }
	for i := 0; i < 4; i++ {
		if err := put("flood", t0); err != nil {
			t.Fatalf("a sender alone, notification %d: %v", i, err)
		}
	}
	if err := put("real", t0); !errors.Is(err, control.ErrFull) {
		t.Fatalf("full buffer: %v, want ErrFull", err)
	}
	<-f.ch // the reader frees one slot
	if err := put("flood", t0.Add(time.Millisecond)); !errors.Is(err, control.ErrFull) {
		t.Fatalf("flooder over its share of 2 while another waits: %v, want ErrFull", err)
	}
	if err := put("real", t0.Add(100*time.Millisecond)); err != nil {
		t.Fatalf("the waiting sender's retry: %v", err)
	}
	<-f.ch
	<-f.ch // flood holds 1, real 1
	if err := put("flood", t0.Add(time.Second)); err != nil {
		t.Fatalf("flooder under its share: %v", err)
	}
	if err := put("flood", t0.Add(time.Second)); !errors.Is(err, control.ErrFull) {
		t.Fatalf("flooder at its share of 2: %v, want ErrFull", err)
	}
	for range 3 {
		<-f.ch
	}
	// A sender that got in is no longer waiting: the flooder, alone
	// again, may fill the buffer.
	t1 := t0.Add(2 * time.Second)
	for i := 0; i < 4; i++ {
		if err := put("flood", t1); err != nil {
			t.Fatalf("alone again, notification %d: %v", i, err)
		}
	}
	// "real" is refused and gives up: its share lapses after WaitMemory.
	if err := put("real", t1); !errors.Is(err, control.ErrFull) {
		t.Fatalf("full buffer: %v, want ErrFull", err)
	}
	<-f.ch
	if err := put("flood", t1.Add(WaitMemory)); !errors.Is(err, control.ErrFull) {
		t.Fatalf("flooder over its share while another waits: %v, want ErrFull", err)
	}
	if err := put("flood", t1.Add(WaitMemory+time.Millisecond)); err != nil {
		t.Fatalf("flooder after the waiter's share lapsed: %v", err)
	}
	if len(f.held) != 1 || f.held["flood"] != 4 || len(f.waiting) != 0 {
		t.Fatalf("held %v, waiting %v", f.held, f.waiting)
	}
}

// TestFairBufferBoundsWaiters: refused senders beyond MaxWaiting are not
// remembered, so names cannot grow the buffer's memory.
func TestFairBufferBoundsWaiters(t *testing.T) {
	f := newFairBuffer(1)
	now := time.Unix(1000, 0)
	if err := f.put(Notification{From: "a"}, now); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2*MaxWaiting; i++ {
		f.put(Notification{From: string(rune('A' + i))}, now)
	}
	if len(f.waiting) != MaxWaiting {
		t.Fatalf("%d waiters remembered, want %d", len(f.waiting), MaxWaiting)
	}
}
