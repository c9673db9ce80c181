package tcp

import "testing"

func TestBudget(t *testing.T) {
	var b budget
	b.init(100)
	if !b.try(60) || !b.try(40) {
		t.Fatal("100 bytes did not fit a budget of 100")
	}
	if b.try(1) {
		t.Fatal("a byte past the budget fit")
	}
	stopped := false
	if b.acquire(1, func() bool { stopped = true; return true }) || !stopped {
		t.Fatal("acquire past the budget returned true, or did not look at stopped")
	}
	if b.waits.Load() != 1 {
		t.Errorf("waits %d, want 1", b.waits.Load())
	}
	b.release(60)
	b.release(40)
	if b.held() != 0 || b.peak.Load() != 100 {
		t.Errorf("held %d, peak %d; want 0 and 100", b.held(), b.peak.Load())
	}
	// A frame larger than the budget goes alone.
	if !b.try(500) || b.try(1) {
		t.Fatal("an oversize frame did not go alone")
	}
	b.release(1000) // more than held: nothing goes below zero
	if b.held() != 0 {
		t.Errorf("held %d after an over-release", b.held())
	}
}
