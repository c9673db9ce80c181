package metastore

import (
	"context"
	"errors"
	"time"

	"github.com/ferrydev/ferry/internal/enum"
)

// ErrNotFound is returned, wrapped, by Store.Get when the key is absent.
// Test for it with errors.Is.
var ErrNotFound = errors.New("metastore: key not found")

// Quotas of the embedded server and the memory store. Descriptors are a
// few KiB (about 120 bytes a registered buffer); the limits protect the
// server from a runaway or hostile client, not from legitimate use.
const (
	// MaxValueSize is the largest value accepted.
	MaxValueSize = 4 << 20
	// MaxKeySize is the longest key accepted.
	MaxKeySize = 4 << 10
	// MaxKeys is how many live keys the store holds at most.
	MaxKeys = 16384
	// MaxTotalSize bounds the bytes of every live key and value together.
	MaxTotalSize = 64 << 20
)

// ErrQuota is returned, wrapped, by a write that would take the embedded
// server or the memory store past one of its quotas (see ServerOptions),
// and by an HTTPClient whose server answered 507 Insufficient Storage.
var ErrQuota = errors.New("metastore full")

// The shares of the quotas (see ServerOptions): entries outside the
// headroom hold at most openShare/shareOf of MaxKeys and MaxTotalSize,
// and one client's entries 1/clientShareOf.
const (
	shareOf       = 4
	openShare     = 3
	clientShareOf = 8
)

// DefaultUnleasedTTL is how long the embedded server and the memory
// store keep an entry written without a lease that is not an engine's
// signed descriptor.
const DefaultUnleasedTTL = time.Hour

// ServerOptions configures the embedded server's quotas (NewServerWith,
// ListenWith, Options.Server); the zero value is the defaults.
//
// A writer that is not an engine must not be able to fill the store for
// engines. So: every entry that is neither leased nor signed expires
// UnleasedTTL after its write; each client (a remote address; writes
// from this process are exempt) holds at most 1/8 of MaxKeys and of
// MaxTotalSize in entries that are not signed; and entries other than
// leased engine descriptors hold at most 3/4 of them, so that the last
// quarter is headroom an engine's descriptor always finds. An engine's
// descriptor is told by Verify, when set (the cluster secret's
// segment.Signer.Verify); without it, any leased entry counts as one, and
// a writer with many addresses can still fill the store: set a cluster
// secret, on the server too (`ferry metad --cluster-secret-file`).
type ServerOptions struct {
	// UnleasedTTL is how long an entry written without a lease, and not
	// signed, lives; 0 means DefaultUnleasedTTL. Mooncake's clients,
	// which write without a lease, must refresh their keys within it.
	UnleasedTTL time.Duration
	// Verify reports whether value, written under key, is an engine's
	// descriptor signed under the cluster secret; nil when the server has
	// no secret. It must not keep value.
	Verify func(key string, value []byte) bool `json:"-"`
}

func (o ServerOptions) withDefaults() ServerOptions {
	if o.UnleasedTTL <= 0 {
		o.UnleasedTTL = DefaultUnleasedTTL
	}
	return o
}

// Store is a key/value store for segment descriptors. Implementations are
// safe for concurrent use. Keys must not be empty.
type Store interface {
	// Get returns the value stored under key. When the key is absent the
	// error wraps ErrNotFound.
	Get(ctx context.Context, key string) ([]byte, error)

	// Put stores value under key, replacing any previous value. The store
	// keeps its own copy: the caller may reuse value afterwards.
	Put(ctx context.Context, key string, value []byte) error

	// Delete removes key. Deleting an absent key is not an error.
	Delete(ctx context.Context, key string) error

	// Close releases the store's resources. Calls after Close may fail.
	Close() error
}

var errEmptyKey = errors.New("key must not be empty")

// Leaser binds keys to the writer's life: the key disappears within ttl
// after the writer stops refreshing it (because it died, or lost the
// metastore for longer than ttl).
type Leaser interface {
	// PutLeased writes key=value bound to a lease of ttl that the store
	// keeps alive in the background until Lease.Close (which deletes the
	// key), until the store is closed, or until the process dies. It fails,
	// creating nothing, when the first write fails.
	PutLeased(ctx context.Context, key string, value []byte, ttl time.Duration) (Lease, error)
}

// Lease is a key kept alive by a Leaser. Its methods are safe for
// concurrent use.
type Lease interface {
	// Update rewrites the value under the same lease. When the write fails
	// the new value is kept and written by the next successful refresh.
	Update(ctx context.Context, value []byte) error

	// Err reports keepalive trouble (metastore unreachable, lease lost).
	// The lease keeps retrying with backoff and re-creates the key when
	// the store is back; only the latest unread error is kept. The channel
	// is closed when the lease stops: after Close, or when the store is
	// closed.
	Err() <-chan error

	// Close stops refreshing and deletes the key. It is safe to call more
	// than once; later calls return nil.
	Close(ctx context.Context) error
}

// Watcher reports changes under a key prefix.
type Watcher interface {
	// Watch reports changes to keys that start with prefix, made after
	// Watch returned. It fails when the store cannot be reached at the
	// start. The channel is closed when ctx ends or the store is closed.
	// When the connection breaks the watch reconnects with backoff and
	// then sends a Resync event: changes may have been missed, so the
	// receiver re-reads what it caches.
	Watch(ctx context.Context, prefix string) (<-chan Event, error)
}

// EventKind says what an Event reports.
type EventKind int

const (
	// Put: Key now holds Value.
	Put EventKind = iota + 1
	// Delete: Key is gone (deleted, or its lease expired).
	Delete
	// Resync: events may have been lost; Key and Value are empty.
	Resync
)

var eventKindNames = [...]string{Put: "put", Delete: "delete", Resync: "resync"}

func (k EventKind) String() string { return enum.String(k, eventKindNames[:], "EventKind") }

// Event is one change seen by a Watcher. Value is untrusted bytes, nil for
// Delete and Resync.
type Event struct {
	Kind  EventKind
	Key   string
	Value []byte
	// Cause says why a Delete's key went, where the store tells (Redis
	// does; etcd and the HTTP metastore do not).
	Cause DeleteCause
}

// DeleteCause is why a key went.
type DeleteCause int

const (
	// CauseUnknown: the store does not say; deleted, or its lease expired.
	CauseUnknown DeleteCause = iota
	// CauseExpired: its TTL ran out (the lease was not refreshed in time).
	CauseExpired
	// CauseDeleted: a client deleted it (or the store evicted it).
	CauseDeleted
)

// Next waits for the next event of a watch: false when the watch has
// closed or ctx has ended, which both end a watcher's loop.
func Next(ctx context.Context, events <-chan Event) (Event, bool) {
	select {
	case ev, ok := <-events:
		return ev, ok
	case <-ctx.Done():
		return Event{}, false
	}
}

// Backend is a Store with leases and watches. Every store in this package
// is one, and Open returns one.
type Backend interface {
	Store
	Leaser
	Watcher
}

// DefaultPollInterval is how often a polling watcher lists its prefix when
// no interval is configured.
const DefaultPollInterval = time.Second

// MinLeaseTTL is the shortest lease PutLeased accepts.
const MinLeaseTTL = 10 * time.Millisecond
