// Package audit is a request-path stage that changes nothing: it counts
// the tasks that pass it and the ones that pass twice. It shows how a
// stage is added (one package, one line of wiring:
// host.WithStage(audit.New())), and the tests use it to check that the
// stage sequence takes every task through each stage exactly once,
// whatever way it entered (Submit, a block list, a QoS resume, a
// failover).
package audit

import (
	"sync"

	"github.com/ferrydev/ferry/host/path"
)

// Stage counts the tasks that pass it. Safe for concurrent use.
type Stage struct {
	mu    sync.Mutex
	seen  map[key]struct{}
	twice []path.Task
}

type key struct {
	batch uint64
	index int
}

// New returns an empty audit stage.
func New() *Stage { return &Stage{seen: make(map[key]struct{})} }

// Name names the stage in errors.
func (s *Stage) Name() string { return "audit" }

// Pass records t; it never refuses one.
func (s *Stage) Pass(t path.Task) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{t.Batch, t.Index}
	if _, ok := s.seen[k]; ok {
		s.twice = append(s.twice, t)
		return nil
	}
	s.seen[k] = struct{}{}
	return nil
}

// Counts returns how many tasks passed, and those that passed more than
// once (each time after the first).
func (s *Stage) Counts() (passed int, twice []path.Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen), append([]path.Task(nil), s.twice...)
}
