package metastore

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// NewMemory returns a Backend holding a map in this process. It is meant
// for tests and for an engine that runs alone in one process; peers in
// other processes cannot see it (use Listen or NewHTTPClient for that). It
// enforces the same rules as the embedded server (see ServerOptions for
// the quotas): keys must not be empty and at most MaxKeySize bytes,
// values are at most MaxValueSize bytes, and writes past the quotas fail
// with ErrQuota. Leased keys expire ttl after their last refresh, other
// keys DefaultUnleasedTTL after their write. Watch is told of every
// write at once and of expiries when they fall due. Close stops the
// leases and watches started through the store; Get, Put and Delete stay
// usable after it.
func NewMemory() Backend {
	return newMemStore(newMemory(ServerOptions{}))
}

// localClient is the client that writes through a memStore: this
// process, which has no share to keep (see ServerOptions).
const localClient = ""

// memory is the map behind both NewMemory and Server. Every entry
// expires: a leased one ttl after its last write, one written without a
// lease unleasedTTL after its write, unless verify says it is an
// engine's signed descriptor.
type memory struct {
	mu        sync.Mutex
	m         map[string]entry
	changed   chan struct{} // closed and replaced at every change
	lastSweep time.Time
	total     int // bytes of every key and value in m, expired or not
	// open counts the entries outside the headroom (not reserved);
	// clients, per writer, the entries not signed (the local one
	// excepted). Expired entries count until swept.
	open    usage
	clients map[string]usage
	// maxKeys and maxTotal are the quotas; tests lower them.
	maxKeys, maxTotal int
	unleasedTTL       time.Duration
	verify            func(key string, value []byte) bool
}

type entry struct {
	value   []byte
	expires time.Time // zero: never
	leased  bool      // written with a ttl (a lease)
	signed  bool      // verify accepted it
	client  string    // who wrote it last
}

// usage is what a class of entries holds.
type usage struct{ keys, bytes int }

func newMemory(o ServerOptions) *memory {
	o = o.withDefaults()
	return &memory{m: make(map[string]entry), changed: make(chan struct{}), maxKeys: MaxKeys, maxTotal: MaxTotalSize,
		clients: make(map[string]usage), unleasedTTL: o.UnleasedTTL, verify: o.Verify}
}

// reserved reports whether e may use the headroom: a leased engine
// descriptor, signed when the store can verify signatures.
func (s *memory) reserved(e entry) bool { return e.leased && (s.verify == nil || e.signed) }

// shared reports whether e counts against its writer's share.
func (s *memory) shares(e entry) bool { return !e.signed && e.client != localClient }

// account adds (sign 1) or removes (sign -1) e under key from the counts.
func (s *memory) account(key string, e entry, sign int) {
	n := len(key) + len(e.value)
	s.total += sign * n
	if !s.reserved(e) {
		s.open.keys += sign
		s.open.bytes += sign * n
	}
	if s.shares(e) {
		u := s.clients[e.client]
		u.keys += sign
		u.bytes += sign * n
		if u.keys <= 0 {
			delete(s.clients, e.client)
		} else {
			s.clients[e.client] = u
		}
	}
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

func (s *memory) put(key string, value []byte) error { return s.putTTL(localClient, key, value, 0) }

// putTTL stores value for client; ttl > 0 makes it a lease that expires
// ttl from now, and an entry without one that is not signed expires
// unleasedTTL from now. It fails, storing nothing, with ErrQuota wrapped
// when a quota would be passed.
func (s *memory) putTTL(client, key string, value []byte, ttl time.Duration) error {
	e := entry{value: append(make([]byte, 0, len(value)), value...), leased: ttl > 0, client: client}
	e.signed = s.verify != nil && s.verify(key, value)
	now := time.Now()
	switch {
	case ttl > 0:
		e.expires = now.Add(ttl)
	case !e.signed:
		e.expires = now.Add(s.unleasedTTL)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweepLocked(now)
	if err := s.fitsLocked(key, e, now); err != nil {
		return err
	}
	old, ok := s.m[key]
	if ok {
		s.account(key, old, -1)
	}
	s.m[key] = e
	s.account(key, e, 1)
	if !ok || !old.same(e, now) {
		s.notifyLocked()
	}
	return nil
}

// same reports whether e, written over old at now, leaves what a
// watcher sees as it was: old was visible, has e's value, and expires no
// later than e (a watcher waits for the expiry it knew of, finds the
// entry still there, and waits for the next). A lease's refresh is such
// a write: it wakes no watcher.
func (old entry) same(e entry, now time.Time) bool {
	later := e.expires.IsZero() || !old.expires.IsZero() && !e.expires.Before(old.expires)
	return !old.expired(now) && later && bytes.Equal(old.value, e.value)
}

// fitsLocked checks the quotas for writing e under key; expired entries
// are swept first when they are in the way.
func (s *memory) fitsLocked(key string, e entry, now time.Time) error {
	for try := 0; ; try++ {
		err := s.quotaLocked(key, e)
		if err == nil || try > 0 {
			return err
		}
		s.lastSweep = time.Time{}
		s.sweepLocked(now)
	}
}

// quotaLocked returns why writing e under key would pass a quota, nil
// when it fits.
func (s *memory) quotaLocked(key string, e entry) error {
	n := len(key) + len(e.value)
	all := usage{keys: len(s.m) + 1, bytes: s.total + n}
	open := s.open
	client := s.clients[e.client]
	if old, ok := s.m[key]; ok {
		on := len(key) + len(old.value)
		all.keys--
		all.bytes -= on
		if !s.reserved(old) {
			open.keys--
			open.bytes -= on
		}
		if s.shares(old) && old.client == e.client {
			client.keys--
			client.bytes -= on
		}
	}
	const fix = "delete keys no engine uses, or give each cluster its own metastore"
	switch {
	case all.keys > s.maxKeys:
		return fmt.Errorf("%w: the store holds %d keys, the limit is %d; %s", ErrQuota, all.keys-1, s.maxKeys, fix)
	case all.bytes > s.maxTotal:
		return fmt.Errorf("%w: %d bytes more would make %d bytes of keys and values, the limit is %d; %s", ErrQuota, n, all.bytes, s.maxTotal, fix)
	}
	if !s.reserved(e) {
		open.keys++
		open.bytes += n
		k, b := s.maxKeys*openShare/shareOf, s.maxTotal*openShare/shareOf
		if open.keys > k || open.bytes > b {
			what := "leased entries"
			if s.verify != nil {
				what = "engines' signed, leased descriptors"
			}
			return fmt.Errorf("%w for entries other than %s (the rest is kept for those): they hold %d keys and %d bytes with this one, the limit is %d keys and %d bytes. Entries without a lease expire %v after their write; %s",
				ErrQuota, what, open.keys, open.bytes, k, b, s.unleasedTTL, fix)
		}
	}
	if s.shares(e) {
		client.keys++
		client.bytes += n
		k, b := s.maxKeys/clientShareOf, s.maxTotal/clientShareOf
		if client.keys > k || client.bytes > b {
			return fmt.Errorf("%w for writes from %s: its entries hold %d keys and %d bytes with this one, a client's share is %d keys and %d bytes (engines' signed descriptors do not count). Entries without a lease expire %v after their write; delete this client's keys, or find out why it writes so much",
				ErrQuota, e.client, client.keys, client.bytes, k, b, s.unleasedTTL)
		}
	}
	return nil
}

// delete reports whether the key was present.
func (s *memory) delete(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.m[key]
	if ok {
		s.account(key, e, -1)
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

// memoryWatchBound is how long a watch of the memory store waits at most
// between two lists. Every change wakes it (wake) and it lists again at
// every expiry (untilExpiry): the bound is only a backstop, and an idle
// engine's watch costs no wakeup a second.
const memoryWatchBound = time.Hour

// untilExpiry returns how long until the next entry expires, or
// memoryWatchBound when none does sooner.
func (s *memory) untilExpiry() time.Duration {
	now := time.Now()
	d := memoryWatchBound
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
			s.account(k, e, -1)
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
		if err := s.mem.putTTL(localClient, key, v, ttl); err != nil {
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
	ch, err := pollWatch(ctx, s.g, prefix, memoryWatchBound,
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
