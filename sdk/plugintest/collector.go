package plugintest

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk/ring"
)

// collectorWait is a safety net against a hang, never a synchronisation
// point.
const collectorWait = 60 * time.Second

// Completion is one descriptor's outcome as a transport reported it.
type Completion struct {
	Token  uint64
	Status ring.Status
	N      uint64 // bytes transferred
}

// Collector is an sdk.RunCompleter for tests that drive a transport in
// process, without the SDK's rings: it records every completion, fails
// the test on a second completion of a token, and lets the test wait for
// one.
type Collector struct {
	t    testing.TB
	mu   sync.Mutex
	got  map[uint64]Completion
	wake chan struct{}
}

// NewCollector returns an empty Collector that reports to t.
func NewCollector(t testing.TB) *Collector {
	return &Collector{t: t, got: make(map[uint64]Completion), wake: make(chan struct{}, 1)}
}

// Complete records a completion (sdk.Completer).
func (c *Collector) Complete(token uint64, st ring.Status, n uint64) {
	c.mu.Lock()
	if _, dup := c.got[token]; dup {
		c.mu.Unlock()
		c.t.Errorf("token %d completed twice", token)
		return
	}
	c.got[token] = Completion{token, st, n}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// CompleteInRun records a completion posted in a run (sdk.RunCompleter),
// as Complete does: a test drives a transport's SubmitRun in process
// with a Collector.
func (c *Collector) CompleteInRun(token uint64, st ring.Status, n uint64) { c.Complete(token, st, n) }

// Wait returns the completion of token, waiting for it (the test fails
// after a minute without it).
func (c *Collector) Wait(token uint64) Completion {
	c.t.Helper()
	limit := time.NewTimer(collectorWait)
	defer limit.Stop()
	for {
		c.mu.Lock()
		got, ok := c.got[token]
		c.mu.Unlock()
		if ok {
			return got
		}
		select {
		case <-c.wake:
		case <-limit.C:
			c.t.Fatalf("token %d: no completion within %s", token, collectorWait)
		}
	}
}

// Count returns how many descriptors completed.
func (c *Collector) Count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// MustEqual fails the test, naming the first differing byte, unless got
// and want are equal.
func MustEqual(t testing.TB, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Fatalf("%s: first difference at byte %d of %d: got %#x, want %#x", what, i, len(got), got[i], want[i])
		}
	}
	t.Fatalf("%s: lengths differ: %d vs %d", what, len(got), len(want))
}
