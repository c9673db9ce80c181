package remotes

import (
	"context"
	"fmt"
	"sync"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
)

// Directory is an engine's remote segments as its API opens them: the
// table, the fetch of descriptors, the metastore watch that follows open
// segments, and the second look at a peer a transfer failed on. It is
// safe for concurrent use; its writes to the table hold Lock.
type Directory struct {
	table      *Table
	fetch      *Fetcher
	lock       sync.Locker
	transports func() []Transport
	log        hclog.Logger
	// follow and watch follow the metastore; nil without one.
	follow *Follower
	watch  *metastore.Rewatch
}

// DirectoryConfig is what a Directory works with.
type DirectoryConfig struct {
	Table *Table
	// Fetch reads descriptors. With a metastore (Fetch.Store), the
	// segments under Fetch.Prefix are watched in Watcher (Follow).
	Fetch   *Fetcher
	Watcher metastore.Watcher
	// Lock serialises the table's writers with the engine's other
	// writers (registrations, plugin restarts); Transports, the engine's
	// plugins in order, is called with it held.
	Lock       sync.Locker
	Transports func() []Transport
	Log        hclog.Logger
}

// NewDirectory returns the directory of c; Follow runs its watch.
func NewDirectory(c DirectoryConfig) *Directory {
	d := &Directory{table: c.Table, fetch: c.Fetch, lock: c.Lock, transports: c.Transports, log: c.Log}
	if c.Fetch.Store == nil || c.Watcher == nil {
		return d
	}
	prefix := segment.Key(c.Fetch.Prefix, "")
	d.watch = &metastore.Rewatch{Name: "segments", Prefix: prefix, W: c.Watcher, OnError: func(err error) {
		c.Log.Warn("metastore watch failed; retrying. Meanwhile open segments learn of a peer's restart when a transfer to it fails", "prefix", prefix, "error", err)
	}}
	d.follow = &Follower{Table: c.Table, Store: c.Fetch.Store, Lock: c.Lock, Transports: c.Transports, Log: c.Log, Timeout: c.Fetch.Timeout, Signer: c.Fetch.Signer}
	return d
}

// Follow subscribes to the metastore's segment descriptors, so that open
// segments follow their peers (see Follower), until ctx ends; its caller
// owns the goroutine that runs it. Without a metastore (kind "none") it
// returns at once, and a change is learnt when a transfer fails, as in
// peer-to-peer mode. The watch is retried with backoff
// (metastore.Rewatch): until it runs, open segments learn of a peer's
// restart when a transfer to it fails, and WatchState says so.
func (d *Directory) Follow(ctx context.Context) {
	if d.watch == nil {
		return
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.watch.Run(ctx)
	}()
	d.follow.Run(ctx, d.watch.Events())
	wg.Wait()
}

// WatchState returns the state of the segments' watch; ok is false
// without a metastore.
func (d *Directory) WatchState() (s metastore.WatchState, ok bool) {
	if d.watch == nil {
		return s, false
	}
	return d.watch.State(), true
}

// openTries bounds how often Open reads a descriptor that keeps changing
// while it is read; the last read's handle is returned.
const openTries = 3

// Open fetches the named segment's descriptor (Fetcher.Fetch) and opens
// it in every transport both engines have (Table.Open).
func (d *Directory) Open(ctx context.Context, name string) (*Handle, error) {
	asked := name
	for try := 1; ; try++ {
		seen := d.seen(segment.Key(d.fetch.Prefix, asked))
		desc, name, key, err := d.fetch.Fetch(ctx, asked)
		if err != nil {
			return nil, err
		}
		d.lock.Lock()
		h, err := d.table.Open(ctx, name, key, desc, d.transports())
		// A change the watch reported while the descriptor was read
		// found no handle to apply to: read it again, so that the
		// handle is not left on a life the peer has left.
		again := err == nil && key != "" && d.follow != nil && d.follow.Seen(key) != seen && try < openTries
		d.lock.Unlock()
		if err != nil {
			return nil, err
		}
		if !again {
			return h, nil
		}
	}
}

// seen is d.follow.Seen(key), 0 without a watch.
func (d *Directory) seen(key string) uint64 {
	if d.follow == nil {
		return 0
	}
	d.lock.Lock()
	defer d.lock.Unlock()
	return d.follow.Seen(key)
}

// Import opens the segment desc describes (Table.Import).
func (d *Directory) Import(ctx context.Context, desc *segment.Descriptor) (*Handle, error) {
	d.lock.Lock()
	defer d.lock.Unlock()
	return d.table.Import(ctx, desc, d.transports())
}

// Close forgets open segment id; its peers are closed in every
// transport (Table.Close).
func (d *Directory) Close(ctx context.Context, id uint32) error {
	d.lock.Lock()
	defer d.lock.Unlock()
	return d.table.Close(ctx, id, d.transports())
}

// recheckTimeout bounds the one descriptor fetch after a peer failed a
// task, so that a slow metastore cannot hold up the failed transfer.
const recheckTimeout = 2 * time.Second

// Recheck fetches h's descriptor again after a plugin failed a task
// because h's peer was unreachable or refused it as addressed to a
// previous incarnation, and says what it shows, to add to the task's
// error: the peer looks down, or restarted; "" when nothing was learnt.
// A restarted peer's handle is retired (see Table.Retire), so that Open
// gives a handle to its new life; where the metastore's watch got there
// first, the handle is retired already and the fetch finds the same.
func (d *Directory) Recheck(ctx context.Context, h *Handle) string {
	name := d.source(h)
	if name == "" {
		return ""
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recheckTimeout)
	defer cancel()
	desc, _, _, err := d.fetch.Fetch(cctx, name)
	switch {
	case err != nil:
		return fmt.Sprintf("the peer looks down (re-reading its descriptor: %v)", err)
	case d.stale(desc):
		// An earlier publication replayed in the metastore: it says
		// nothing of the peer now, and must not retire its handle.
		return fmt.Sprintf("the peer looks down (the metastore holds an older descriptor of %q than this engine has seen, seq %d: replayed by a writer of the metastore; its engine writes the newest back)", desc.Name, desc.Seq)
	case desc.Name != h.Name:
		// Another engine answers where this one's control service was
		// (its port reused, or an unspecified listen address such as
		// 0.0.0.0 published): nothing is learnt about this peer.
		return fmt.Sprintf("the peer looks down (its control address %s now answers for engine %q)", name, desc.Name)
	case desc.Incarnation != h.Desc.Incarnation:
		d.lock.Lock()
		d.table.Retire(ctx, h.ID, desc.Incarnation, d.transports())
		d.lock.Unlock()
		return fmt.Sprintf("segment %q restarted (now incarnation %#x, this handle is bound to %#x): open it again", h.Name, desc.Incarnation, h.Desc.Incarnation)
	}
	return ""
}

// Reread fetches h's descriptor again, from where Open read it (the
// metastore, or the peer's control service in peer-to-peer mode), and
// applies it as the metastore's watch applies a change: a moved endpoint
// of the same life is re-opened (Table.Open; the handle changes), a new
// life retires the handle. It reports whether the handle changed. It is
// how a handle nothing watches (peer-to-peer) follows a peer whose
// plugin restarted or was upgraded on a new endpoint; an imported handle
// (a blob) is left alone, since nothing says where to read it again.
func (d *Directory) Reread(ctx context.Context, h *Handle) (bool, error) {
	if h.Imported || h.Retired != "" {
		return false, nil
	}
	name := d.source(h)
	if name == "" {
		return false, nil
	}
	desc, _, _, err := d.fetch.Fetch(ctx, name)
	if err != nil {
		return false, err
	}
	if desc.Name != h.Name || d.stale(desc) {
		return false, nil // another engine answers there, or a replay
	}
	d.lock.Lock()
	defer d.lock.Unlock()
	cur := d.table.Get(h.ID)
	if cur == nil || cur.Retired != "" {
		return false, nil
	}
	switch Decide(cur.Desc, cur.Gone != "", Change{Desc: desc, Ordered: d.table.Ordered}) {
	case Refresh:
		_, err := d.table.Open(ctx, cur.Name, cur.Key, desc, d.transports())
		return err == nil, err
	case Retire:
		d.table.Retire(ctx, cur.ID, desc.Incarnation, d.transports())
		return true, nil
	}
	return false, nil
}

// source is what Fetch reads h's descriptor again by: its segment name in
// the metastore, or in peer-to-peer mode the peer's control address
// (the peer is asked itself); "" when there is none.
func (d *Directory) source(h *Handle) string {
	if d.fetch.Store == nil {
		return h.Desc.Control
	}
	return h.Name
}

// stale reports whether desc, read from the metastore, is older than the
// newest descriptor of its name the table has seen.
func (d *Directory) stale(desc *segment.Descriptor) bool {
	d.lock.Lock()
	defer d.lock.Unlock()
	return d.table.Stale(desc.Name, desc)
}
