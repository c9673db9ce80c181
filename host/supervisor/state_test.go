package supervisor

import (
	"errors"
	"testing"
)

func TestNext(t *testing.T) {
	states := []State{Starting, Running, Down, Restarting, Failed}
	events := []Event{Launched, Refused, Exited, Attempt, AttemptFailed, Upgraded}
	valid := map[[2]int]State{
		{int(Starting), int(Launched)}:        Running,
		{int(Starting), int(Refused)}:         Failed,
		{int(Running), int(Exited)}:           Down,
		{int(Down), int(Attempt)}:             Restarting,
		{int(Restarting), int(Launched)}:      Running,
		{int(Restarting), int(AttemptFailed)}: Down,
		{int(Running), int(Upgraded)}:         Running,
	}
	for _, s := range states {
		for _, ev := range events {
			got, ok := Next(s, ev)
			want, wantOK := valid[[2]int{int(s), int(ev)}]
			if !wantOK {
				want = s
			}
			if got != want || ok != wantOK {
				t.Errorf("Next(%v, %v) = %v, %v; want %v, %v", s, ev, got, ok, want, wantOK)
			}
		}
	}
}

// TestLifeOfARestart runs a plugin through one crash, a failed restart
// attempt and a good one, and checks what Down, State, Changed and Status
// say at each step.
func TestLifeOfARestart(t *testing.T) {
	s := New(Config{})
	p := &Plugin{set: s, name: "tcp"}
	steps := []struct {
		ev     Event
		state  State
		down   bool
		status string
	}{
		{Launched, Running, false, "running"},
		{Exited, Down, true, "restarting"},
		{Attempt, Restarting, true, "restarting"},
		{AttemptFailed, Down, true, "restarting"},
		{Attempt, Restarting, true, "restarting"},
		{Launched, Running, false, "running"},
	}
	for i, st := range steps {
		ch := s.Changed()
		if !p.to(st.ev) {
			t.Fatalf("step %d: %v refused in %v", i, st.ev, p.State())
		}
		select {
		case <-ch:
		default:
			t.Fatalf("step %d: Changed not closed by %v", i, st.ev)
		}
		if s.Changed() == ch {
			t.Fatalf("step %d: Changed not replaced", i)
		}
		if p.State() != st.state || p.Down() != st.down {
			t.Fatalf("step %d: after %v: state %v down %v, want %v %v", i, st.ev, p.State(), p.Down(), st.state, st.down)
		}
		if got := p.Status(t.Context()).State; got != st.status {
			t.Fatalf("step %d: status %q, want %q", i, got, st.status)
		}
	}
	ch := s.Changed()
	if p.to(Refused) {
		t.Fatal("a running plugin was refused")
	}
	select {
	case <-ch:
		t.Fatal("Changed closed by an invalid transition")
	default:
	}
}

// TestStatusRestartingReason: a plugin that is restarting says why its
// run ended and why the last attempt failed.
func TestStatusRestartingReason(t *testing.T) {
	s := New(Config{})
	p := &Plugin{set: s, name: "tcp"}
	p.state.Store(uint32(Running))
	why := "the plugin process exited"
	p.lastExit.Store(&why)
	p.to(Exited)
	p.to(Attempt)
	msg := `plugin "tcp" (/bin/x): probe failed`
	s.attemptFailed(p, errors.New(msg))
	st := p.Status(t.Context())
	if want := why + "; last restart attempt: " + msg; st.State != "restarting" || st.Reason != want || st.LastExit != why {
		t.Fatalf("status %q %q (last exit %q), want restarting %q", st.State, st.Reason, st.LastExit, want)
	}
	if p.State() != Down {
		t.Fatalf("after a failed attempt: %v, want Down", p.State())
	}
}
