package metastore

import (
	"context"
	"errors"
)

// ErrNotFound is returned, wrapped, by Store.Get when the key is absent.
// Test for it with errors.Is.
var ErrNotFound = errors.New("metastore: key not found")

// MaxValueSize is the largest value the embedded server and the memory store
// accept. Descriptors are a few KiB; the limit protects the server from a
// runaway or hostile client, not from legitimate use.
const MaxValueSize = 16 << 20

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
