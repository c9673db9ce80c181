package remotes

import (
	"context"
	"errors"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
)

// Follower applies a metastore watch to a table: a peer that
// re-registers, restarts or goes away changes its handles when the watch
// fires.
type Follower struct {
	Table *Table
	Store metastore.Store // re-read after a Resync
	// Lock is the table writers' lock; Transports is called with it held.
	Lock       sync.Locker
	Transports func() []Transport
	Log        hclog.Logger
	Timeout    time.Duration    // bounds one re-read
	Now        func() time.Time // nil: time.Now
	// Signer verifies what the watch reports; nil without a cluster
	// secret. A refused descriptor changes no handle.
	Signer *segment.Signer

	// seen counts the changes seen per key, resyncs those that may have
	// been missed for every key; both under Lock. See Seen.
	seen    map[string]uint64
	resyncs uint64
}

// Seen returns a number that changes whenever the watch reports a change
// to key (or may have missed one), whether or not a handle caches it; the
// caller holds Lock. A change that lands while OpenSegment reads a
// descriptor finds no handle to apply to: comparing Seen before the read
// and after the handle is in the table tells the opener to read again.
func (f *Follower) Seen(key string) uint64 { return f.seen[key] + f.resyncs }

// Run applies events until they end (the watch closed) or ctx ends. The
// caller owns the goroutine that runs it and ends it through ctx.
func (f *Follower) Run(ctx context.Context, events <-chan metastore.Event) {
	for {
		ev, ok := metastore.Next(ctx, events)
		if !ok {
			return
		}
		switch ev.Kind {
		case metastore.Put, metastore.Delete:
			f.Lock.Lock()
			if f.seen == nil {
				f.seen = make(map[string]uint64)
			}
			f.seen[ev.Key]++
			watched := f.watched(ev.Key)
			f.Lock.Unlock()
			if watched {
				// The store's value now, not the event's: events of a
				// burst of publishes can arrive after the opener already
				// read a newer descriptor, and applying an older one
				// would take back the buffers registered since.
				f.reread(ctx, ev.Key)
			}
		case metastore.Resync:
			// Changes may have been missed: read again every key a
			// handle caches.
			f.Lock.Lock()
			f.resyncs++
			keys := f.Table.Keys()
			f.Lock.Unlock()
			for _, key := range keys {
				f.reread(ctx, key)
			}
		}
	}
}

func (f *Follower) watched(key string) bool {
	for _, h := range f.Table.handles.load() {
		if h != nil && h.Key == key && h.Retired == "" {
			return true
		}
	}
	return false
}

// change decodes an event; a value that is not a descriptor changes
// nothing (Desc nil).
func (f *Follower) change(ev metastore.Event) Change {
	if ev.Kind == metastore.Delete {
		return Change{Deleted: true}
	}
	d, err := f.Signer.Decode(ev.Key, ev.Value)
	if err != nil {
		f.Log.Warn("metastore watch: ignoring a value that is not a descriptor, or not validly signed; open segments keep the descriptor they have", "key", ev.Key, "error", err)
		return Change{}
	}
	return Change{Desc: d, Ordered: f.Signer != nil}
}

func (f *Follower) reread(ctx context.Context, key string) {
	cctx, cancel := context.WithTimeout(ctx, f.Timeout)
	raw, err := f.Store.Get(cctx, key)
	cancel()
	switch {
	case errors.Is(err, metastore.ErrNotFound):
		f.apply(ctx, key, Change{Deleted: true})
	case ctx.Err() != nil:
		// The watch is ending (the engine closes): nothing to try again,
		// and nothing an operator need hear about.
	case err != nil:
		f.Log.Warn("metastore watch: re-reading a descriptor after a resync failed; the next resync tries again", "key", key, "error", err)
	default:
		f.apply(ctx, key, f.change(metastore.Event{Kind: metastore.Put, Key: key, Value: raw}))
	}
}

func (f *Follower) apply(ctx context.Context, key string, c Change) {
	now := time.Now
	if f.Now != nil {
		now = f.Now
	}
	f.Lock.Lock()
	done := f.Table.Apply(ctx, key, c, f.Transports(), now())
	f.Lock.Unlock()
	for _, a := range done {
		if a != Keep {
			f.Log.Info("remote segment changed in the metastore", "key", key, "action", a.String())
		}
	}
}
