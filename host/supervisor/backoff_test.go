package supervisor

import (
	"testing"
	"time"
)

// TestBackoffSchedule walks one outage on a simulated clock: each attempt
// is due a doubled wait after the previous one ended, capped at Max, and
// a slow attempt does not eat into the next wait.
func TestBackoffSchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	s := Backoff{Min: 100 * time.Millisecond, Max: time.Second}.Start(t0)
	if got, want := s.Due(), t0.Add(100*time.Millisecond); !got.Equal(want) {
		t.Fatalf("first attempt due %v, want %v", got.Sub(t0), want.Sub(t0))
	}
	now := s.Due()
	// Each attempt takes 3 s to fail (a plugin that times out): the next
	// one is due a wait after that, not at once.
	for i, want := range []time.Duration{200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		end := now.Add(3 * time.Second)
		s.Failed(end)
		if s.Wait() != want {
			t.Fatalf("after failure %d: wait %v, want %v", i+1, s.Wait(), want)
		}
		if got := s.Due().Sub(end); got != want {
			t.Fatalf("after failure %d: due %v after the failure, want %v", i+1, got, want)
		}
		now = s.Due()
	}
}

func TestBackoffDefaults(t *testing.T) {
	t0 := time.Unix(0, 0)
	for _, tc := range []struct {
		name      string
		b         Backoff
		first     time.Duration
		afterMany time.Duration
	}{
		{"zero is the default", Backoff{}, DefaultBackoff.Min, DefaultBackoff.Max},
		{"engine's", DefaultBackoff, 100 * time.Millisecond, 10 * time.Second},
		{"max below min is min", Backoff{Min: time.Second, Max: time.Millisecond}, time.Second, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.b.Start(t0)
			if got := s.Due().Sub(t0); got != tc.first {
				t.Fatalf("first wait %v, want %v", got, tc.first)
			}
			for range 20 {
				s.Failed(t0)
			}
			if s.Wait() != tc.afterMany {
				t.Fatalf("wait after 20 failures %v, want %v", s.Wait(), tc.afterMany)
			}
		})
	}
}
