package remotes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
)

// Errors the table and the fetch return, wrapped with the segment and
// what failed. Their texts are the public API's (package host), which
// maps them onto its own sentinels.
var (
	ErrNotFound    = errors.New("segment not found")
	ErrUnreachable = errors.New("transport unavailable")
)

// Transport is one plugin as the table sees it, in the engine's plugin
// order: Handle.Opened is indexed the same way.
type Transport interface {
	Name() string
	// Usable reports whether the plugin runs now; the others are not
	// asked to open or close peers.
	Usable() bool
	SameMachineOnly() bool
	OpenPeer(ctx context.Context, p sdk.Peer) error
	ClosePeer(ctx context.Context, id uint32) error
}

// Handle is one open remote segment, bound to one life (incarnation) of
// its peer. A Handle is never changed once in the table: a change stores
// a new copy, so the submit path reads a consistent one lock-free.
type Handle struct {
	ID   uint32 // 1-based index in the table
	Name string
	// Key is the metastore key the descriptor came from, whose watch
	// events apply to the handle; "" when it came from the peer's
	// control service (peer-to-peer mode), which nothing watches.
	Key  string
	Desc *segment.Descriptor
	// Opened[i] is true when transport i has the peer open.
	Opened []bool
	// Retired says why this handle no longer reaches its segment (the
	// peer restarted); requests on it are refused before anything is
	// sent, so its new life never receives them.
	Retired string
	// Gone says that the descriptor left the metastore, and when; ""
	// while it is there. Requests still go out.
	Gone string
	// Imported says the descriptor came from a blob (Import), which the
	// application fetches anew when the peer restarts.
	Imported bool
}

// Table is the set of open remote segments. Get is lock-free; the other
// methods are writers, serialised by the caller.
type Table struct {
	// Ordered says that descriptors read from the metastore were
	// verified under the cluster secret, so their Seq can be trusted:
	// the table then never takes one older than the newest it has seen
	// for the name (see Newest). Set it before the first Open.
	Ordered bool

	machineID string        // this engine's, for same-machine-only transports
	timeout   time.Duration // bounds one call to one plugin
	handles   atomicHandles
	changed   changeSignal
	counts    lifeCounts // see counts.go
	// newest is the newest descriptor read from the metastore for each
	// name, when Ordered: kept after its handles close, at most
	// maxNewest names.
	newest map[string]*segment.Descriptor
}

// maxNewest bounds the names whose newest descriptor the table keeps.
const maxNewest = 4096

// Newest returns the newest descriptor of name read from the metastore
// that the table has seen (nil when none, or when not Ordered): what it
// keeps when the metastore shows an older one, an invalid one or none.
func (t *Table) Newest(name string) *segment.Descriptor {
	if !t.Ordered {
		return nil
	}
	return t.newest[name]
}

// Stale reports whether d, just read from the metastore for name, is
// older than the newest the table has seen: a replay, from which nothing
// is learnt.
func (t *Table) Stale(name string, d *segment.Descriptor) bool {
	n := t.Newest(name)
	return n != nil && segment.Older(d, n)
}

// saw records d as seen for name, when it is the newest.
func (t *Table) saw(name string, d *segment.Descriptor) {
	if !t.Ordered {
		return
	}
	if n := t.newest[name]; n != nil && segment.Older(d, n) {
		return
	}
	if t.newest == nil {
		t.newest = make(map[string]*segment.Descriptor)
	}
	if _, ok := t.newest[name]; !ok && len(t.newest) >= maxNewest {
		for k := range t.newest { // forget one, any
			delete(t.newest, k)
			break
		}
	}
	t.newest[name] = d
}

// New returns an empty table for an engine on machineID; timeout bounds
// each call to a plugin.
func New(machineID string, timeout time.Duration) *Table {
	t := &Table{machineID: machineID, timeout: timeout}
	t.handles.store([]*Handle{})
	t.changed.init()
	return t
}

// Get returns the handle id, nil when none is open under it.
func (t *Table) Get(id uint32) *Handle {
	cur := t.handles.load()
	if id == 0 || int(id) > len(cur) {
		return nil
	}
	return cur[id-1]
}

// Changed returns a channel closed at the next change of any handle.
func (t *Table) Changed() <-chan struct{} { return t.changed.wait() }

// set stores h in its slot (nil h: clears slot id) and signals the change.
func (t *Table) set(id uint32, h *Handle) {
	next := slices.Clone(t.handles.load())
	if int(id) > len(next) {
		next = append(next, h)
	} else {
		next[id-1] = h
	}
	t.handles.store(next)
	t.changed.signal()
}

// Open returns the handle for d, the descriptor just read for name (from
// key; "" in peer-to-peer mode). A handle open on the same life of the
// peer takes d and is returned; one open on a previous life is retired;
// otherwise every usable transport that d offers opens the peer under a
// new handle, which fails when none does. When the table is Ordered and
// d came from the metastore but is older than the newest descriptor seen
// for name (a replay), the newest is used instead.
func (t *Table) Open(ctx context.Context, name, key string, d *segment.Descriptor, ts []Transport) (*Handle, error) {
	return t.open(ctx, name, key, d, ts, false)
}

// Import is Open for a descriptor the application handed in as a blob:
// the segment is known by the name d carries, nothing watches it, and a
// handle it retires says to import a new blob.
func (t *Table) Import(ctx context.Context, d *segment.Descriptor, ts []Transport) (*Handle, error) {
	return t.open(ctx, d.Name, "", d, ts, true)
}

func (t *Table) open(ctx context.Context, name, key string, d *segment.Descriptor, ts []Transport, imported bool) (*Handle, error) {
	if key != "" {
		if n := t.Newest(name); n != nil && segment.Older(d, n) {
			d = n
		}
		t.saw(name, d)
	}
	for _, h := range t.handles.load() {
		if h == nil || h.Name != name || h.Retired != "" {
			continue
		}
		if h.Desc.Incarnation == d.Incarnation {
			// The same life: the handle takes d, re-opening in each
			// transport what moved (a plugin of the peer restarted or
			// was upgraded), as a watch's refresh would. Taking d
			// without that would leave the plugin on the old endpoint
			// while the handle says the new one, and the watch's own
			// refresh, finding nothing changed, would never move it.
			h2 := *h
			h2.Opened = t.reopenMoved(ctx, h, d.Transports, ts)
			h2.Desc, h2.Gone = d, ""
			if key != "" {
				h2.Key = key
			}
			t.set(h.ID, &h2)
			return &h2, nil
		}
		t.Retire(ctx, h.ID, d.Incarnation, ts)
	}
	cur := t.handles.load()
	h := &Handle{ID: uint32(len(cur) + 1), Name: name, Key: key, Desc: d, Opened: make([]bool, len(ts)), Imported: imported}
	if i := slices.Index(cur, nil); i >= 0 {
		h.ID = uint32(i + 1)
	}
	var reasons []string
	opened := false
	for i, tr := range ts {
		ep, ok := d.Transports[tr.Name()]
		switch {
		case !tr.Usable():
			reasons = append(reasons, fmt.Sprintf("%s: not running here", tr.Name()))
			continue
		case !ok:
			reasons = append(reasons, fmt.Sprintf("%s: %q does not offer it", tr.Name(), name))
			continue
		case tr.SameMachineOnly() && d.MachineID != t.machineID:
			reasons = append(reasons, fmt.Sprintf("%s: same machine only, %q is on %q", tr.Name(), name, d.MachineID))
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := tr.OpenPeer(cctx, sdk.Peer{ID: h.ID, Segment: name, Incarnation: d.Incarnation, MachineID: d.MachineID, Endpoint: ep})
		cancel()
		if err != nil {
			reasons = append(reasons, fmt.Sprintf("%s: %v", tr.Name(), err))
			continue
		}
		h.Opened[i], opened = true, true
	}
	if !opened {
		return nil, fmt.Errorf("%w: open segment %q: no transport reaches it (%v)", ErrUnreachable, name, reasons)
	}
	t.set(h.ID, h)
	t.counts.opened.Add(1)
	return h, nil
}

// Retire marks handle id as bound to a previous life of its peer, now at
// incarnation inc, and closes it in the transports. A handle already
// retired, closed, or at inc is left alone.
func (t *Table) Retire(ctx context.Context, id uint32, inc uint64, ts []Transport) {
	h := t.Get(id)
	if h == nil || h.Retired != "" || h.Desc.Incarnation == inc {
		return
	}
	h2 := *h
	again := "open it again for a new handle"
	if h.Imported {
		again = "import a blob of its new life (Engine.ImportSegment) or open it again for a new handle"
	}
	h2.Retired = fmt.Sprintf("segment %q restarted (now incarnation %#x; handle %d is bound to %#x): %s", h.Name, inc, h.ID, h.Desc.Incarnation, again)
	h2.Opened = make([]bool, len(h.Opened))
	t.set(id, &h2)
	t.counts.retired.Add(1)
	t.closePeers(ctx, h, ts)
}

func (t *Table) closePeers(ctx context.Context, h *Handle, ts []Transport) {
	for i, ok := range h.Opened {
		if ok && i < len(ts) && ts[i].Usable() {
			cctx, cancel := context.WithTimeout(ctx, t.timeout)
			ts[i].ClosePeer(cctx, h.ID)
			cancel()
		}
	}
}

// Close forgets handle id; its peers are closed in every transport.
func (t *Table) Close(ctx context.Context, id uint32, ts []Transport) error {
	h := t.Get(id)
	if h == nil {
		return fmt.Errorf("%w: close segment %d: not open", ErrNotFound, id)
	}
	t.set(id, nil)
	t.closePeers(ctx, h, ts)
	return nil
}

// Apply applies c, a change to key seen by the watch, to every live
// handle read from key, as Decide says. It returns what it did to each
// (for logs and tests).
func (t *Table) Apply(ctx context.Context, key string, c Change, ts []Transport, now time.Time) []Action {
	var done []Action
	for _, h := range t.handles.load() {
		if h == nil || h.Key != key || h.Key == "" || h.Retired != "" {
			continue
		}
		a := Decide(h.Desc, h.Gone != "", c)
		if a == Refresh || a == Retire {
			t.saw(h.Name, c.Desc)
		}
		switch a {
		case Refresh:
			h2 := *h
			h2.Opened = t.reopenMoved(ctx, h, c.Desc.Transports, ts)
			h2.Desc, h2.Gone = c.Desc, ""
			t.set(h.ID, &h2)
		case Retire:
			t.Retire(ctx, h.ID, c.Desc.Incarnation, ts)
		case Gone:
			h2 := *h
			h2.Gone = fmt.Sprintf("its descriptor left the metastore at %s", now.UTC().Format(time.RFC3339))
			t.set(h.ID, &h2)
		}
		done = append(done, a)
	}
	return done
}

// All returns the open handles (retired ones too), in id order.
func (t *Table) All() []*Handle {
	var out []*Handle
	for _, h := range t.handles.load() {
		if h != nil {
			out = append(out, h)
		}
	}
	return out
}

// Keys returns the metastore keys that live handles were read from.
func (t *Table) Keys() []string {
	var keys []string
	for _, h := range t.handles.load() {
		if h != nil && h.Key != "" && h.Retired == "" && !slices.Contains(keys, h.Key) {
			keys = append(keys, h.Key)
		}
	}
	return keys
}

// Controls returns the control addresses of the live handles: the
// peers whose cached control clients the engine keeps (a restarted peer
// listens on a new port).
func (t *Table) Controls() map[string]bool {
	live := map[string]bool{}
	for _, h := range t.handles.load() {
		if h != nil && h.Retired == "" {
			live[h.Desc.Control] = true
		}
	}
	return live
}

// Replay opens every live handle's peer again, with its id, in
// transport i, named name, through open: the plugin restarted. A peer
// is opened at its descriptor's endpoint for name, unless moved, when
// not nil, returns another for it: the endpoint the restarted plugin
// itself has now, for a segment whose descriptor this engine publishes
// (its own), which the metastore still lists at the old one. The handle
// then records the new endpoint, so that the refresh the republished
// descriptor brings does not close and re-open the peer (reopenMoved)
// for a move already made.
func (t *Table) Replay(ctx context.Context, i int, name string, open func(ctx context.Context, p sdk.Peer) error, moved func(h *Handle) ([]byte, bool)) error {
	for _, h := range t.handles.load() {
		if h == nil || h.Retired != "" || i >= len(h.Opened) || !h.Opened[i] {
			continue
		}
		d := h.Desc
		ep, move := d.Transports[name], false
		if moved != nil {
			if next, ok := moved(h); ok && !bytes.Equal(next, ep) {
				ep, move = next, true
			}
		}
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		err := open(cctx, sdk.Peer{ID: h.ID, Segment: h.Name, Incarnation: d.Incarnation, MachineID: d.MachineID, Endpoint: ep})
		cancel()
		if err != nil {
			return fmt.Errorf("re-open peer %q: %w", h.Name, err)
		}
		if move {
			d2 := *d
			d2.Transports = maps.Clone(d.Transports)
			d2.Transports[name] = ep
			h2 := *h
			h2.Desc = &d2
			t.set(h.ID, &h2)
		}
	}
	return nil
}

// atomicHandles is the table's slice, swapped whole.
type atomicHandles struct{ p atomic.Pointer[[]*Handle] }

func (a *atomicHandles) load() []*Handle   { return *a.p.Load() }
func (a *atomicHandles) store(h []*Handle) { a.p.Store(&h) }

// changeSignal is a broadcast: wait returns a channel that signal closes.
type changeSignal struct{ ch atomic.Pointer[chan struct{}] }

func (c *changeSignal) init() {
	ch := make(chan struct{})
	c.ch.Store(&ch)
}

func (c *changeSignal) wait() <-chan struct{} { return *c.ch.Load() }

// signal wakes every waiter; writers only, so never twice at once.
func (c *changeSignal) signal() {
	ch := make(chan struct{})
	close(*c.ch.Swap(&ch))
}
