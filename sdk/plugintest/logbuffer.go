package plugintest

import (
	"bytes"
	"sync"
)

// LogBuffer collects what a child process's output goroutine or a logger
// writes while the test reads it: a bytes.Buffer behind a lock. The zero
// value is ready to use.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns everything written so far.
func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
