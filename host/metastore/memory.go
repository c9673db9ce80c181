package metastore

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// NewMemory returns a Backend holding a map in this process. It is meant
// for tests and for an engine that runs alone in one process; peers in
// other processes cannot see it (use Listen or NewHTTPClient for that). It
// enforces the same rules as the embedded server: keys must not be empty
// and at most MaxKeySize bytes, values are at most MaxValueSize bytes, and
// writes past MaxKeys keys or MaxTotalSize bytes fail with ErrQuota. Leased keys expire ttl after
// their last refresh. Watch is told of every write at once and of expiries
// when they fall due. Close stops the leases and watches started through
// the store; Get, Put and Delete stay usable after it.
func NewMemory() Backend {
	return newMemStore(newMemory())
}

// memory is the map behind both NewMemory and Server. Entries with a
// non-zero expiry are leased: past it they count as absent.
type memory struct {
	mu        sync.Mutex
	m         map[string]entry
	changed   chan struct{} // closed and replaced at every change
	lastSweep time.Time
	total     int // bytes of every key and value in m, expired or not
	// maxKeys and maxTotal are the quotas; tests lower them.
	maxKeys, maxTotal int
}

type entry struct {
	value   []byte
	expires time.Time // zero: never
}

func newMemory() *memory {
	return &memory{m: make(map[string]entry), changed: make(chan struct{}), maxKeys: MaxKeys, maxTotal: MaxTotalSize}
}

// get returns a copy of the value so that callers cannot alias the map.
func (s *memory) get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if !ok || e.expired(time.Now()) {
		return nil, false
	}
	return append([]byte(nil), e.value...), true
}

func (s *memory) put(key string, value []byte) error { return s.putTTL(key, value, 0) }

// putTTL stores value; ttl > 0 makes the key expire ttl from now. It
// fails, storing nothing, with ErrQuota wrapped when the store would hold
// more than maxKeys keys or maxTotal bytes.
func (s *memory) putTTL(key string, value []byte, ttl time.Duration) error {
	e := entry{value: append(make([]byte, 0, len(value)), value...)}
	now := time.Now()
	if ttl > 0 {
		e.expires = now.Add(ttl)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	if err := s.fitsLocked(key, len(value), now); err != nil {
		return err
	}
	if old, ok := s.m[key]; ok {
		s.total -= len(key) + len(old.value)
	}
	s.m[key] = e
	s.total += len(key) + len(value)
	s.notifyLocked()
	return nil
}

// fitsLocked checks the quotas for writing n bytes under key; expired
// entries are swept first when they are in the way.
func (s *memory) fitsLocked(key string, n int, now time.Time) error {
	for try := 0; ; try++ {
		keys, total := len(s.m), s.total+len(key)+n
		if old, ok := s.m[key]; ok {
			keys--
			total -= len(key) + len(old.value)
		}
		switch {
		case keys+1 > s.maxKeys && try == 0, total > s.maxTotal && try == 0:
			s.lastSweep = time.Time{}
			s.sweepLocked(now)
			continue
		case keys+1 > s.maxKeys:
			return fmt.Errorf("%w: the store holds %d keys, the limit is %d; delete keys, or give each cluster its own metastore", ErrQuota, keys, s.maxKeys)
		case total > s.maxTotal:
			return fmt.Errorf("%w: %d bytes more would make %d bytes of keys and values, the limit is %d; delete keys, or give each cluster its own metastore", ErrQuota, len(key)+n, total, s.maxTotal)
		}
		return nil
	}
}

// delete reports whether the key was present.
func (s *memory) delete(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if ok {
		s.total -= len(key) + len(e.value)
	}
	delete(s.m, key)
	s.notifyLocked()
	return ok && !e.expired(time.Now())
}

// list returns copies of the live entries under prefix.
func (s *memory) list(prefix string) map[string][]byte {
	m := s.shared(prefix)
	for k, v := range m {
		m[k] = append([]byte(nil), v...)
	}
	return m
}

// shared returns the live entries under prefix with the map's own values:
// an entry's value is never written after it is stored (a put replaces
// it), so the caller may read them but must not change them. Sharing them
// keeps a listing of the whole store from doubling it.
func (s *memory) shared(prefix string) map[string][]byte {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string][]byte)
	for k, e := range s.m {
		if strings.HasPrefix(k, prefix) && !e.expired(now) {
			out[k] = e.value
		}
	}
	return out
}

// wake returns a channel closed at the next change.
func (s *memory) wake() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// untilExpiry returns how long until the next leased entry expires, or
// DefaultPollInterval when none does sooner.
func (s *memory) untilExpiry() time.Duration {
	now := time.Now()
	d := DefaultPollInterval
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.m {
		if !e.expires.IsZero() && e.expires.After(now) {
			d = min(d, e.expires.Sub(now)+time.Millisecond)
		}
	}
	return d
}

func (s *memory) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// sweepLocked drops expired entries, at most once a second, so that keys
// of dead writers that nobody reads do not pile up.
func (s *memory) sweepLocked(now time.Time) {
	if now.Sub(s.lastSweep) < time.Second {
		return
	}
	s.lastSweep = now
	for k, e := range s.m {
		if e.expired(now) {
			s.total -= len(k) + len(e.value)
			delete(s.m, k)
		}
	}
}

func (e entry) expired(now time.Time) bool {
	return !e.expires.IsZero() && !now.Before(e.expires)
}

// memStore is a Backend over a memory: the map of NewMemory, or of a
// Server. Its group owns the leases and watches started through it.
type memStore struct {
	mem *memory
	g   *group
}

var _ Backend = (*memStore)(nil)

func newMemStore(m *memory) *memStore { return &memStore{mem: m, g: newGroup()} }

func (s *memStore) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey(ctx, "GET", key); err != nil {
		return nil, err
	}
	v, ok := s.mem.get(key)
	if !ok {
		return nil, fmt.Errorf("metastore memory: GET key %q: %w", key, ErrNotFound)
	}
	return v, nil
}

func (s *memStore) Put(ctx context.Context, key string, value []byte) error {
	if err := checkKey(ctx, "PUT", key); err != nil {
		return err
	}
	if err := checkSize("PUT", key, value); err != nil {
		return err
	}
	if err := s.mem.put(key, value); err != nil {
		return fmt.Errorf("metastore memory: PUT key %q: %w", key, err)
	}
	return nil
}

func (s *memStore) Delete(ctx context.Context, key string) error {
	if err := checkKey(ctx, "DELETE", key); err != nil {
		return err
	}
	s.mem.delete(key)
	return nil
}

// PutLeased implements Leaser. The refresh runs in this process, so the key
// outlives a dead writer only if the map does (the embedded server's map,
// read by peers through HTTP).
func (s *memStore) PutLeased(ctx context.Context, key string, value []byte, ttl time.Duration) (Lease, error) {
	if err := checkKey(ctx, "PUT", key); err != nil {
		return nil, err
	}
	if err := checkTTL(ttl); err != nil {
		return nil, fmt.Errorf("metastore memory: PUT key %q: %w", key, err)
	}
	if err := checkSize("PUT", key, value); err != nil {
		return nil, err
	}
	write := func(ctx context.Context, v []byte) error {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("metastore memory: PUT key %q: %w", key, err)
		}
		if err := s.mem.putTTL(key, v, ttl); err != nil {
			return fmt.Errorf("metastore memory: PUT key %q: %w", key, err)
		}
		return nil
	}
	return startLease(ctx, s.g, fmt.Sprintf("metastore memory: lease on key %q", key), value, ttl, keeper{
		write: write,
		remove: func(context.Context) error {
			s.mem.delete(key)
			return nil
		},
	})
}

// Watch implements Watcher. It lists the map when it changes and when a
// lease falls due, so events arrive at once.
func (s *memStore) Watch(ctx context.Context, prefix string) (<-chan Event, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("metastore memory: watch %q: %w", prefix, err)
	}
	ch, err := pollWatch(ctx, s.g, prefix, DefaultPollInterval,
		func(context.Context, string) (map[string][]byte, error) { return s.mem.list(prefix), nil },
		s.mem.wake, s.mem.untilExpiry)
	if err != nil {
		return nil, fmt.Errorf("metastore memory: watch %q: %w", prefix, err)
	}
	return ch, nil
}

// Close stops the leases and watches started through s. Leased keys are
// left to expire.
func (s *memStore) Close() error {
	s.g.close()
	return nil
}

func checkKey(ctx context.Context, method, key string) error {
	if key == "" {
		return fmt.Errorf("metastore memory: %s: %w", method, errEmptyKey)
	}
	if len(key) > MaxKeySize {
		return fmt.Errorf("metastore memory: %s key %.64q...: the key is %d bytes, the limit is %d", method, key, len(key), MaxKeySize)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("metastore memory: %s key %q: %w", method, key, err)
	}
	return nil
}

func checkSize(method, key string, value []byte) error {
	if len(value) > MaxValueSize {
		return fmt.Errorf("metastore memory: %s key %q: value of %d bytes exceeds the %d-byte limit", method, key, len(value), MaxValueSize)
	}
	return nil
}
