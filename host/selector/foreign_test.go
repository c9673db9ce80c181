package selector

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestForeignMemory: memory an application allocated itself (local or
// the target's) is never routed to a transport that maps memory; the
// explanation says why, what to do, and names the extra copy of the one
// that is taken.
func TestForeignMemory(t *testing.T) {
	s, err := New(policies, names)
	if err != nil {
		t.Fatal(err)
	}
	cands := func() []Transport {
		c := transports()
		c[0].ForeignMemory = true // tcp copies; shm maps
		return c
	}
	for _, c := range []struct {
		name    string
		req     Request
		explain []string
	}{
		{"local foreign, same machine: not shm", Request{Size: 4096, SameMachine: true, LocalForeign: true},
			[]string{"tcp: taken", "shm: considered, skipped: maps memory for zero copy and cannot reach the local buffer", "allocate it through Engine.Allocate",
				"the local buffer is memory the application allocated itself", "one extra copy"}},
		{"remote foreign, same machine: not shm", Request{Size: 4096, SameMachine: true, RemoteForeign: true},
			[]string{"tcp: taken", "cannot reach the target buffer", "the peer should allocate it through Engine.Allocate", "one extra copy there"}},
		{"both foreign", Request{Size: 4096, SameMachine: true, LocalForeign: true, RemoteForeign: true},
			[]string{"tcp: taken", "one extra copy on each side"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := s.Select(&c.req, cands())
			if err != nil {
				t.Fatal(err)
			}
			if len(p.Transports) != 1 || p.Transports[0] != "tcp" {
				t.Fatalf("plan %v, want tcp alone", p.Transports)
			}
			i, _, err := s.Route(&c.req, cands())
			if err != nil || i != 0 {
				t.Fatalf("route: %d, %v; want tcp", i, err)
			}
			text := p.Explain()
			for _, want := range c.explain {
				if !strings.Contains(text, want) {
					t.Errorf("explanation lacks %q:\n%s", want, text)
				}
			}
		})
	}
	// A hint to shm for foreign memory is refused with the reason, and so
	// is a request no transport can carry.
	r := Request{Size: 4096, SameMachine: true, LocalForeign: true, Hint: "shm"}
	if _, _, err := s.Route(&r, cands()); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "Engine.Allocate") {
		t.Fatalf("shm hinted for foreign memory: %v", err)
	}
	r = Request{Size: 4096, SameMachine: true, LocalForeign: true}
	if _, _, err := s.Route(&r, transports()); !errors.Is(err, ErrNoTransport) || !strings.Contains(err.Error(), "maps memory for zero copy") {
		t.Fatalf("no transport takes foreign memory: %v", err)
	}
	// Memory from Allocate still prefers shm on the same machine.
	r = Request{Size: 4096, SameMachine: true}
	if i, _, err := s.Route(&r, cands()); err != nil || i != 1 {
		t.Fatalf("mapped memory: %d, %v; want shm", i, err)
	}
}

// TestForeignLocalOnly: a transport that reaches app memory only on this
// side (shm with cross-memory attach) carries a request whose local
// buffer is app memory, with no extra copy, and is skipped, with a clear
// "unsupported" naming what to do, when the target buffer is such memory.
func TestForeignLocalOnly(t *testing.T) {
	s, err := New(policies, names)
	if err != nil {
		t.Fatal(err)
	}
	cands := func() []Transport {
		c := transports()
		c[0].ForeignMemory = true
		c[1].ForeignMemory, c[1].ForeignLocalOnly = true, true
		return c
	}
	for _, c := range []struct {
		name    string
		req     Request
		want    []string // the plan's transports
		explain []string
	}{
		{"local foreign, same machine: shm, no extra copy", Request{Size: 4096, SameMachine: true, LocalForeign: true}, []string{"shm", "tcp"},
			[]string{"shm: taken (in the policy's order; app memory by cross-memory attach straight to or from the peer's mapping, no extra copy)",
				"tcp: usable, a later attempt (in the policy's order; app memory by cross-memory attach, one extra copy here)",
				"none where it copies straight to or from the peer's mapping"}},
		{"remote foreign: not shm", Request{Size: 4096, SameMachine: true, RemoteForeign: true}, []string{"tcp"},
			[]string{"tcp: taken", "one extra copy there",
				"shm: considered, skipped: maps memory for zero copy and cannot reach the target buffer, which the peer's application allocated itself " +
					"(it reaches such memory only on this engine's side): unsupported; a copying transport such as tcp reaches it"}},
		{"both foreign: not shm", Request{Size: 4096, SameMachine: true, LocalForeign: true, RemoteForeign: true}, []string{"tcp"},
			[]string{"tcp: taken", "one extra copy on each side", "unsupported"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := s.Select(&c.req, cands())
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(p.Transports, c.want) {
				t.Fatalf("plan %v, want %v", p.Transports, c.want)
			}
			i, _, err := s.Route(&c.req, cands())
			if err != nil || cands()[i].Name != c.want[0] {
				t.Fatalf("route: %d, %v; want %s", i, err, c.want[0])
			}
			text := p.Explain()
			for _, want := range c.explain {
				if !strings.Contains(text, want) {
					t.Errorf("explanation lacks %q:\n%s", want, text)
				}
			}
		})
	}
	// shm hinted for a target of app memory is refused with the reason.
	r := Request{Size: 4096, SameMachine: true, RemoteForeign: true, Hint: "shm"}
	if _, _, err := s.Route(&r, cands()); !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "unsupported") {
		t.Fatalf("shm hinted for the peer's app memory: %v", err)
	}
	// An older plugin's ForeignMemory alone still means both sides.
	old := cands()
	old[1].ForeignLocalOnly = false
	r = Request{Size: 4096, SameMachine: true, RemoteForeign: true}
	if i, _, err := s.Route(&r, old); err != nil || i != 1 {
		t.Fatalf("a transport that reaches app memory on both sides: %d, %v; want shm", i, err)
	}
}
