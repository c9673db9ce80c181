package notify

import (
	"context"
	"testing"
	"time"
)

// TestPruneClosesOldPeersClients: the client of an address no peer
// publishes any more, idle long enough, is closed and forgotten (a
// restarted peer's old port leaves nothing behind); a kept or recently
// used one stays, and a pruned address dials again when asked.
func TestPruneClosesOldPeersClients(t *testing.T) {
	a, b, s := start(t, "a", 1), start(t, "b", 2), start(t, "s", 3)
	ca, err := s.Client(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	cb, err := s.Client(b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if n := s.Prune(func(string) bool { return false }, time.Hour); n != 0 {
		t.Fatalf("pruned %d clients used just now", n)
	}
	if n := s.Prune(func(addr string) bool { return addr == a.Addr() }, 0); n != 1 {
		t.Fatalf("pruned %d, want b's client only", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := ca.Ping(ctx); err != nil {
		t.Fatalf("the kept client: %v", err)
	}
	if _, _, err := cb.Ping(ctx); err == nil {
		t.Fatal("the pruned client still answers: not closed")
	}
	cb2, err := s.Client(b.Addr())
	if err != nil || cb2 == cb {
		t.Fatalf("b's address after the prune: %v (same client: %v)", err, cb2 == cb)
	}
	if _, _, err := cb2.Ping(ctx); err != nil {
		t.Fatalf("b dialed again: %v", err)
	}
}
