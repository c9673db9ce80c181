package metastore

import (
	"context"
	"testing"
	"time"
)

// TestMemoryRefreshWakesNoWatcher: rewriting an entry with its value and
// a later expiry (a lease's refresh) leaves what a watcher sees as it
// was, so it is not a change; any other write is.
func TestMemoryRefreshWakesNoWatcher(t *testing.T) {
	now := time.Now()
	v := []byte("v")
	at := func(d time.Duration) time.Time { return now.Add(d) }
	for _, c := range []struct {
		name     string
		old, new entry
		same     bool
	}{
		{"refresh", entry{value: v, expires: at(time.Second)}, entry{value: v, expires: at(2 * time.Second)}, true},
		{"never expires", entry{value: v}, entry{value: v}, true},
		{"new value", entry{value: v, expires: at(time.Second)}, entry{value: []byte("w"), expires: at(2 * time.Second)}, false},
		{"sooner expiry", entry{value: v, expires: at(2 * time.Second)}, entry{value: v, expires: at(time.Second)}, false},
		{"expiry where there was none", entry{value: v}, entry{value: v, expires: at(time.Second)}, false},
		{"old one expired", entry{value: v, expires: at(-time.Second)}, entry{value: v, expires: at(time.Second)}, false},
	} {
		if got := c.old.same(c.new, now); got != c.same {
			t.Errorf("%s: same = %v, want %v", c.name, got, c.same)
		}
	}
}

// TestMemoryWatchSeesSoonerExpiry: a watch waits for the expiry it knows
// of; an entry rewritten with its value but a sooner expiry wakes it, so
// that the entry's expiry is reported when it comes, not at the old one.
// The rewrite comes once the watch has looked at the expiries (the
// memStore's watch, with its look at them reported).
func TestMemoryWatchSeesSoonerExpiry(t *testing.T) {
	s := newMemStore(newMemory(ServerOptions{}))
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.mem.putTTL(localClient, "p/k", []byte("v"), time.Hour); err != nil {
		t.Fatal(err)
	}
	looked := make(chan struct{}, 1)
	next := func() time.Duration {
		d := s.mem.untilExpiry()
		select {
		case looked <- struct{}{}:
		default:
		}
		return d
	}
	list := func(context.Context, string) (map[string][]byte, error) { return s.mem.list("p/"), nil }
	ch, err := pollWatch(ctx, s.g, "p/", memoryWatchBound, list, s.mem.wake, next)
	if err != nil {
		t.Fatal(err)
	}
	<-looked
	if err := s.mem.putTTL(localClient, "p/k", []byte("v"), 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-ch:
		if e.Kind != Delete || e.Key != "p/k" {
			t.Fatalf("event %+v, want the delete of p/k", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("an entry whose expiry was brought forward to 50ms was not reported gone within 10s")
	}
}
