// Package example is the template of a Ferry transport plugin: a complete
// same-machine transport built on sdk/kit, small enough to read in one
// sitting. It moves bytes over a unix-domain stream socket: the initiator's
// plugin sends a frame per descriptor to the target engine's plugin, which
// checks it against what its engine registered and copies straight between
// the socket and the registered memory. It is two-sided (the target's
// plugin applies what the initiator sent), so it honours the fence
// (sdk.Fencer, with kit.Fences). Copy this module, rename it, and replace
// the socket with your hardware; README.md says how to build, test, pin and
// ship it, and the SDK's GUIDE.md states the contract.
package example

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Name is the transport's name: the label of its `plugin "example"` block
// and the ferry-plugin-example binary's suffix.
const Name = "example"

// MaxSlice is the longest descriptor the plugin takes (Info.MaxSlice).
const MaxSlice = 256 << 20

// settings is the plugin's `config { ... }` block, decoded and checked;
// every attribute is optional:
//
//	config {
//	  dir         = "/run/ferry"  # where the socket's private directory is made; default os.TempDir()
//	  queue_depth = 1024          # descriptors queued per peer before Submit waits; 1..65536
//	}
type settings struct {
	dir   string
	depth int
}

// Settings declares the settings as the host declares its own
// (sdk/conf): defaults, ranges, errors at the operator's file:line:col,
// "did you mean", and a reference section rendered from it.
var Settings = &conf.Table[settings]{
	Name: Name,
	Doc:  "The example transport (`plugin \"example\" { config { ... } }`): same-machine, over a unix socket.",
	Fields: []conf.Field[settings]{
		{Name: "dir", Type: conf.String, DefaultDoc: "os.TempDir()", Example: `"/run/ferry"`,
			Doc: "Where the socket's private directory is made; an absolute path.",
			At:  func(s *settings) any { return &s.dir },
			Check: func(s *settings) error {
				if !filepath.IsAbs(s.dir) {
					return fmt.Errorf("%q is not an absolute path", s.dir)
				}
				return nil
			}},
		{Name: "queue_depth", Type: conf.Int, Default: 1024, Min: 1, Max: 1 << 16,
			Doc: "Descriptors queued per peer before Submit waits.",
			At:  func(s *settings) any { return &s.depth }},
	},
}

// decode reads cfg.Config; its errors point into the operator's file.
func decode(cfg sdk.StartConfig) (settings, error) {
	s := settings{dir: os.TempDir()}
	err := conf.Decode(cfg, Name+" config", Settings, &s, nil)
	if s.dir == "" {
		s.dir = os.TempDir()
	}
	return s, err
}

// region is a registered region; the kit counts the references to it so
// that UnregisterMemory can wait for the frames still using it.
type region struct{ kit.RegionBase }

// Transport is the plugin. The zero value is not usable: call New.
type Transport struct {
	base   kit.Base[*region, *peer]
	fences kit.Fences
	log    hclog.Logger // JSON on stderr; the host shows it under the plugin's name

	set  settings
	run  uint64 // the host's number for this run of the plugin (StartConfig.Run)
	dir  string // the socket's private directory
	ln   net.Listener
	mu   sync.Mutex            // guards served against Stop's sweep
	conn map[net.Conn]struct{} // connections served, closed by Stop

	sent, received stat
}

// New returns a transport ready for ServeTransport.
func New() *Transport {
	t := &Transport{conn: map[net.Conn]struct{}{}, log: kit.Logger(Name)}
	t.base.Name = Name
	return t
}

var (
	_ sdk.Transport     = (*Transport)(nil)
	_ sdk.Fencer        = (*Transport)(nil)
	_ sdk.ConfigChecker = (*Transport)(nil)
)

// Describe states what the host may plan with. It works before Start.
func (t *Transport) Describe(context.Context) (sdk.Info, error) {
	return sdk.Info{
		Name: Name, Version: "0.1.0",
		Ops:             []ring.Op{ring.OpWrite, ring.OpRead},
		MaxSlice:        MaxSlice,
		PreferredSlice:  4 << 20,
		SameMachineOnly: true, // a unix socket reaches this machine only
		TwoSided:        true, // the target's plugin applies what we send
	}, nil
}

// Probe: unix sockets are always there. One rail, the socket.
func (t *Transport) Probe(context.Context) (sdk.ProbeResult, error) {
	return sdk.ProbeResult{Available: true, Rails: []sdk.Rail{{Name: "unix", NUMANode: -1}}}, nil
}

// CheckConfig decodes the block as Start would, starting nothing.
func (t *Transport) CheckConfig(_ context.Context, cfg sdk.StartConfig) error {
	_, err := decode(cfg)
	return err
}

// Start listens on a socket in a directory only this user can enter (that
// is the authentication: same machine, same user) and publishes its path.
func (t *Transport) Start(_ context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
	return t.base.Start(cfg, func() (sdk.Endpoint, error) {
		s, err := decode(cfg)
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp(s.dir, "ferry-example-") // mode 0700
		if err != nil {
			return nil, fmt.Errorf("%s: start: %w", Name, err)
		}
		path := filepath.Join(dir, "sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("%s: start: %w", Name, err)
		}
		t.set, t.run, t.dir, t.ln = s, cfg.Run, dir, ln
		t.base.Goroutines.Add(1)
		go t.accept()
		return sdk.Endpoint(path), nil
	})
}

// RegisterMemory adds r to the region table after the kit's checks
// (permission, memory kind, not empty, not registered twice).
func (t *Transport) RegisterMemory(_ context.Context, r sdk.Region) error {
	return t.base.RegisterMemory(r, func(r sdk.Region) *region {
		g := &region{}
		g.Init(r)
		return g
	})
}

// UnregisterMemory returns once no frame uses the region's memory.
func (t *Transport) UnregisterMemory(ctx context.Context, id uint32) error {
	r, err := t.base.UnregisterMemory(id)
	if err != nil {
		return err
	}
	r.Release() // the table's reference
	select {
	case <-r.Drained():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s: unregister region %d: %w", Name, id, ctx.Err())
	}
}

// OpenPeer prepares a peer; its connection is dialed by its worker on
// first use, so an unreachable peer fails descriptors, not OpenPeer.
func (t *Transport) OpenPeer(_ context.Context, p sdk.Peer) error {
	if err := t.base.CheckPeer(p); err != nil {
		return err
	}
	if !filepath.IsAbs(string(p.Endpoint)) {
		return t.base.PeerError(p, fmt.Errorf("endpoint %q is not a socket path", p.Endpoint))
	}
	pe := newPeer(t, p)
	return t.base.AddPeer(p.ID, pe, func() {
		t.base.Goroutines.Add(1) // here Stop cannot miss it
		go pe.serve()
	})
}

// ClosePeer ends the peer's work: what is queued completes with
// StatusShutdown.
func (t *Transport) ClosePeer(_ context.Context, id uint32) error { return t.base.ClosePeer(id) }

// Submit checks d (kit: stopped, NOP, deadline, peer open, local region
// and bounds) and queues it for the peer's worker. It never does I/O.
func (t *Transport) Submit(d *ring.Descriptor, c sdk.Completer) {
	if d.Length > MaxSlice {
		t.base.Fail(d, c, ring.StatusInvalid)
		return
	}
	p, r, mem, ok := t.base.Accept(d, c)
	if ok {
		p.enqueue(op{d: *d, r: r, mem: mem, c: c})
	}
}

// finish completes o exactly once: it drops the local region's reference
// first, since the completion promises the memory is no longer touched.
func (t *Transport) finish(o op, st ring.Status, n uint64) {
	o.r.Release()
	t.base.Outcomes.Count(st)
	o.c.Complete(o.d.Token, st, n)
}

// Stats exports the kit's outcome counters and the bytes moved.
func (t *Transport) Stats(context.Context) (map[string]uint64, error) {
	m := map[string]uint64{"bytes_sent": t.sent.Load(), "bytes_received": t.received.Load()}
	t.base.Outcomes.Export(m)
	return m, nil
}

// Fence is the receiving half of "ended means ended at both ends":
// kit.Fences refuses the run's frames and connections from now on and
// returns once none is being applied.
func (t *Transport) Fence(ctx context.Context, from string, run uint64) (sdk.FenceResult, error) {
	return t.fences.Fence(ctx, from, run)
}

// Stop closes the listener, the served connections and the peers (whose
// queued work completes with StatusShutdown) and waits for every
// goroutine. The SDK calls it once its lanes no longer call Submit.
func (t *Transport) Stop(ctx context.Context) error {
	return t.base.Stop(ctx, func() {
		for _, p := range t.base.Peers.CloseAll() {
			p.Close()
		}
		t.mu.Lock()
		if t.ln != nil {
			t.ln.Close()
			os.RemoveAll(t.dir)
		}
		for c := range t.conn {
			c.Close()
		}
		t.mu.Unlock()
	})
}
