package tcp_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
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

// newLoggedWorld is newWorld with its own configuration and log for each
// engine.
func newLoggedWorld(t testing.TB, size int, configA, configB string, logA, logB *logSink) *world {
	t.Helper()
	return worldOf(t, size, startWithLogger(t, "engine-a", 100, configA, logA.logger()),
		startWithLogger(t, "engine-b", 200, configB, logB.logger()))
}
