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

// TestStartupsShed: max_startups read as OpenSSH reads MaxStartups, on
// plain data.
func TestStartupsShed(t *testing.T) {
	s := startups{start: 10, rate: 30, full: 20}
	cases := []struct {
		pending, roll int
		shed          bool
	}{
		{0, 0, false},
		{9, 0, false}, // below start: never
		{10, 29, true},
		{10, 30, false}, // at start: rate percent
		{15, 64, true},
		{15, 65, false}, // half way: 30 + 70/2 percent
		{19, 92, true},
		{19, 93, false},
		{20, 99, true}, // at full: always
		{500, 99, true},
	}
	for _, c := range cases {
		if got := s.shed(c.pending, c.roll); got != c.shed {
			t.Errorf("%v with %d pending, roll %d: shed %v, want %v", s, c.pending, c.roll, got, c.shed)
		}
	}
	one := startups{start: 5, rate: 100, full: 5}
	if one.shed(4, 99) || !one.shed(5, 99) {
		t.Errorf("%v: want no shedding below 5 and always at 5", one)
	}
}

func TestParseStartups(t *testing.T) {
	for in, want := range map[string]startups{
		"64:30:256": {64, 30, 256},
		"10":        {10, 100, 10},
		"1:0:1":     {1, 0, 1},
	} {
		if got, err := parseStartups(in); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1:2", "1:2:3:4", "-1:30:10", "10:30:5", "0:0:0", "1:200:2", "x"} {
		if got, err := parseStartups(in); err == nil {
			t.Errorf("%q: %v, want an error", in, got)
		}
	}
}

// TestProofBindsDialerName: the dialer's name from FlagFrom is part of
// what both proofs cover, so a per-peer limit keys on a name the secret
// vouches for.
func TestProofBindsDialerName(t *testing.T) {
	secret := []byte("0123456789abcdef")
	tr := transcript{version: ProtocolVersion, segment: "engine-b", incarnation: 7, listenerInc: 7, maxFrame: 1 << 20}
	none := authMAC(secret, proofByDialer, &tr)
	tr.from = "engine-a"
	a := authMAC(secret, proofByDialer, &tr)
	tr.from = "engine-x"
	x := authMAC(secret, proofByDialer, &tr)
	if a == none || a == x || x == none {
		t.Errorf("proofs for no name, engine-a and engine-x are not all different")
	}
	if !verifyMAC(secret, proofByDialer, &tr, x) || verifyMAC(secret, proofByDialer, &tr, a) {
		t.Errorf("a proof verifies for another dialer name")
	}
}
