package selector

import (
	"errors"
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
