package tcp_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// logSink is a log output that keeps every line, so a test can check what
// was logged and wait for a line as the sign that something happened.
type logSink struct {
	mu      sync.Mutex
	lines   []string
	changed chan struct{} // closed and replaced at every write
}

func newLogSink() *logSink { return &logSink{changed: make(chan struct{})} }

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		s.lines = append(s.lines, l)
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

func (s *logSink) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: "tcp", Output: s, Level: hclog.Debug})
}

// count returns how many lines contain every one of words.
func (s *logSink) count(words ...string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
next:
	for _, l := range s.lines {
		for _, w := range words {
			if !strings.Contains(l, w) {
				continue next
			}
		}
		n++
	}
	return n
}

// waitFor waits until a line contains every one of words.
func (s *logSink) waitFor(t testing.TB, words ...string) {
	t.Helper()
	limit := time.NewTimer(waitLimit)
	defer limit.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if s.count(words...) > 0 {
			return
		}
		select {
		case <-ch:
		case <-limit.C:
			t.Fatalf("no log line with %q within %s; log:\n%s", words, waitLimit, s.String())
		}
	}
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// startLogged is startEngine with the engine's log going to log.
func startLogged(t testing.TB, name string, incarnation uint64, config string, log *logSink) *engine {
	t.Helper()
	tr := tcp.New(tcp.WithLogger(log.logger()))
	ep, err := tr.Start(context.Background(), sdk.StartConfig{
		Engine: name, Incarnation: incarnation, Config: []byte(config), ConfigFile: "test.hcl", ConfigLine: 1, ConfigColumn: 1,
	})
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := tr.Stop(context.Background()); err != nil {
			t.Errorf("stop %s: %v", name, err)
		}
	})
	return &engine{tr: tr, name: name, incarnation: incarnation, ep: ep}
}

// newLoggedWorld is newWorld with its own configuration and log for each
// engine.
func newLoggedWorld(t testing.TB, size int, configA, configB string, logA, logB *logSink) *world {
	t.Helper()
	w := &world{col: plugintest.NewCollector(t)}
	w.a = startLogged(t, "engine-a", 100, configA, logA)
	w.b = startLogged(t, "engine-b", 200, configB, logB)
	w.src, w.dst = make([]byte, size), make([]byte, size)
	w.rw, w.ro, w.local = make([]byte, size), make([]byte, 1<<16), make([]byte, 1<<16)
	fill(w.ro, 11)
	fill(w.local, 12)
	w.a.register(t, aSrc, w.src, sdk.PermLocal)
	w.a.register(t, aDst, w.dst, sdk.PermLocal)
	w.b.register(t, bRW, w.rw, sdk.PermRemoteReadWrite)
	w.b.register(t, bRO, w.ro, sdk.PermRemoteRead)
	w.b.register(t, bLocal, w.local, sdk.PermLocal)
	w.a.open(t, peerB, w.b)
	return w
}
