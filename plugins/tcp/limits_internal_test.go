package tcp

import (
	"testing"
	"time"
)

func TestEvery(t *testing.T) {
	e := every{interval: time.Second}
	t0 := time.Now()
	steps := []struct {
		at   time.Duration
		ok   bool
		held uint64
	}{
		{0, true, 0},
		{time.Millisecond, false, 0},
		{999 * time.Millisecond, false, 0},
		{time.Second, true, 2},
		{1500 * time.Millisecond, false, 0},
		{5 * time.Second, true, 1},
		{5 * time.Second, false, 0},
	}
	for i, s := range steps {
		ok, held := e.allow(t0.Add(s.at))
		if ok != s.ok || held != s.held {
			t.Errorf("step %d at %s: %v, %d held; want %v, %d", i, s.at, ok, held, s.ok, s.held)
		}
	}
}
