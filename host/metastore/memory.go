package metastore

import (
	"context"
	"fmt"
	"sync"
)

// NewMemory returns a Store backed by a map in this process. It is meant for
// tests and for an engine that runs alone in one process; peers in other
// processes cannot see it (use Listen or NewHTTPClient for that). It enforces
// the same rules as the embedded server: keys must not be empty and values
// are at most MaxValueSize bytes. Close is a no-op and the store stays
// usable after it.
func NewMemory() Store {
	return &memory{m: make(map[string][]byte)}
}

// memory is the map behind both NewMemory and Server.
type memory struct {
	mu sync.RWMutex
	m  map[string][]byte
}

func (s *memory) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(ctx, "GET", key); err != nil {
		return nil, err
	}
	v, ok := s.get(key)
	if !ok {
		return nil, fmt.Errorf("metastore memory: GET key %q: %w", key, ErrNotFound)
	}
	return v, nil
}

func (s *memory) Put(ctx context.Context, key string, value []byte) error {
	if err := checkKey(ctx, "PUT", key); err != nil {
		return err
	}
	if len(value) > MaxValueSize {
		return fmt.Errorf("metastore memory: PUT key %q: value of %d bytes exceeds the %d-byte limit", key, len(value), MaxValueSize)
	}
	s.put(key, value)
	return nil
}

func (s *memory) Delete(ctx context.Context, key string) error {
	if err := checkKey(ctx, "DELETE", key); err != nil {
		return err
	}
	s.delete(key)
	return nil
}

func (s *memory) Close() error { return nil }

// get returns a copy of the value so that callers cannot alias the map.
func (s *memory) get(key string) ([]byte, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	v, ok := s.m[key]
	if !ok {
		return nil, false
	}
	return append([]byte(nil), v...), true
}

func (s *memory) put(key string, value []byte) {
	v := append(make([]byte, 0, len(value)), value...)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = v
}

// delete reports whether the key was present.
func (s *memory) delete(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[key]
	delete(s.m, key)
	return ok
}

func checkKey(ctx context.Context, method, key string) error {
	if key == "" {
		return fmt.Errorf("metastore memory: %s: %w", method, errEmptyKey)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("metastore memory: %s key %q: %w", method, key, err)
	}
	return nil
}
