package remotes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
)

// lookupTries and lookupBackoff bound how a metastore lookup retries
// through an outage: about 3 s in all before the caller gets the error.
const (
	lookupTries   = 5
	lookupBackoff = 200 * time.Millisecond
)

// Fetcher reads segment descriptors.
type Fetcher struct {
	// Store is the metastore; nil when its kind is "none" (peer-to-peer
	// only).
	Store  metastore.Store
	Prefix string // the configured key prefix
	// Peer returns the descriptor JSON the control service at addr
	// serves (peer-to-peer mode).
	Peer    func(ctx context.Context, addr string) ([]byte, error)
	Log     hclog.Logger
	Timeout time.Duration // bounds one call to the metastore or a peer
	// Signer verifies descriptors; nil without a cluster secret, when
	// any descriptor is believed.
	Signer *segment.Signer
}

// Fetch finds a segment's descriptor and returns it, the name to know the
// segment by and the metastore key it was read from. The rule: the
// metastore is asked first (unless there is none); when it has no
// descriptor under name, or there is no metastore, and name looks like
// host:port, the descriptor is fetched from the control service at that
// address (peer-to-peer mode, key ""), and the segment is known by the
// name in that descriptor, which is the name its plugins answer to.
func (f *Fetcher) Fetch(ctx context.Context, name string) (*segment.Descriptor, string, string, error) {
	key := segment.Key(f.Prefix, name)
	if f.Store != nil {
		raw, err := f.lookup(ctx, key)
		switch {
		case err == nil:
			d, err := f.Signer.Decode(key, raw)
			if err != nil {
				return nil, "", "", fmt.Errorf("%w: open segment %q: %w", ErrNotFound, name, err)
			}
			return d, name, key, nil
		case !errors.Is(err, metastore.ErrNotFound):
			return nil, "", "", fmt.Errorf("%w: open segment %q: %w", ErrNotFound, name, err)
		}
		if !IsHostPort(name) {
			return nil, "", "", fmt.Errorf("%w: open segment %q: no descriptor at %q; is the engine running and using the same metastore?", ErrNotFound, name, key)
		}
	} else if !IsHostPort(name) {
		return nil, "", "", fmt.Errorf("%w: open segment %q: no metastore (kind \"none\"): import a blob of the segment (Engine.ImportSegment, exported by its engine with Engine.ExportSegment), or open the peer by its control address (host:port)", ErrNotFound, name)
	}
	cctx, cancel := context.WithTimeout(ctx, f.Timeout)
	raw, err := f.Peer(cctx, name)
	cancel()
	if err != nil {
		return nil, "", "", fmt.Errorf("%w: open segment %q (peer-to-peer): %w", ErrNotFound, name, err)
	}
	d, err := f.Signer.Decode("control://"+name, raw)
	if err != nil {
		return nil, "", "", fmt.Errorf("%w: open segment %q: %w", ErrNotFound, name, err)
	}
	// The peer is reachable where we reached it, whatever it published
	// (it may listen on 0.0.0.0).
	d.Control = name
	return d, d.Name, "", nil
}

// lookup reads key from the metastore, retrying with backoff while the
// metastore fails (not when the key is absent) and logging each failure.
func (f *Fetcher) lookup(ctx context.Context, key string) ([]byte, error) {
	wait := lookupBackoff
	for try := 1; ; try++ {
		cctx, cancel := context.WithTimeout(ctx, f.Timeout)
		raw, err := f.Store.Get(cctx, key)
		cancel()
		if err == nil || errors.Is(err, metastore.ErrNotFound) || try == lookupTries || ctx.Err() != nil {
			return raw, err
		}
		f.Log.Warn("metastore lookup failed; retrying", "key", key, "try", try, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, err
		}
		wait *= 2
	}
}

// IsHostPort reports whether name reads as host:port with a port.
func IsHostPort(name string) bool {
	host, port, err := net.SplitHostPort(name)
	if err != nil || host == "" {
		return false
	}
	p, err := strconv.ParseUint(port, 10, 16)
	return err == nil && p != 0
}
