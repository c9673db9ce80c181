// Package kit is the scaffolding every transport plugin repeats, for a
// vendor to compose into its own sdk.Transport: the lifecycle guards
// (Start once, nothing after Stop, Stop more than once), the region table
// with its checks, the table of open peers, the goroutines Stop waits for,
// the outcome counters, the checks Submit starts with (Admit, Local,
// Accept), the decoding and range checks of a `config { ... }` block
// (Settings), the default logger (Logger), the machine id to publish
// (MachineID), and for memory the application allocated itself
// (Base.ForeignMemory) the copies in and out of the host (CopyIn,
// CopyOut) and pooled bounce buffers (GetBounce). Base is generic over the plugin's
// region type and per-peer state, so the data path reads them without
// type assertions or allocations.
//
// It owns no goroutines of its own beyond Stop's wait, no sockets and no
// wire format: what a transport does with a descriptor stays in the
// plugin. It must not import the host (sdk/layering_test.go).
//
// A plugin's scaffolding, all of it. What is left to write is the
// transport itself: listen (the endpoint), Peer.Close, and the goroutine
// that takes ops from t.work, moves the bytes, and then calls r.Release(),
// t.base.Outcomes.Count(st) and c.Complete(token, st, n).
//
//	type region struct{ kit.RegionBase }
//
//	type peer struct{ addr string }
//
//	func (p *peer) Close() {} // end the peer's connections and goroutines
//
//	type op struct {
//		p     *peer
//		r     *region
//		mem   []byte
//		token uint64
//		c     sdk.Completer
//	}
//
//	type Transport struct {
//		base kit.Base[*region, *peer]
//		work chan op
//	}
//
//	func (t *Transport) Start(_ context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
//		return t.base.Start(cfg, func() (sdk.Endpoint, error) { return t.listen(cfg) })
//	}
//
//	func (t *Transport) RegisterMemory(_ context.Context, r sdk.Region) error {
//		return t.base.RegisterMemory(r, func(r sdk.Region) *region {
//			g := &region{}
//			g.Init(r)
//			return g
//		})
//	}
//
//	func (t *Transport) OpenPeer(_ context.Context, p sdk.Peer) error {
//		if err := t.base.CheckPeer(p); err != nil {
//			return err
//		}
//		return t.base.AddPeer(p.ID, &peer{addr: string(p.Endpoint)}, nil)
//	}
//
//	func (t *Transport) ClosePeer(_ context.Context, id uint32) error { return t.base.ClosePeer(id) }
//
//	func (t *Transport) Submit(d *ring.Descriptor, c sdk.Completer) {
//		p, r, mem, ok := t.base.Accept(d, c) // stopped, NOP, deadline, peer, region, bounds
//		if ok {
//			t.work <- op{p: p, r: r, mem: mem, token: d.Token, c: c}
//		}
//	}
//
//	func (t *Transport) Stop(ctx context.Context) error {
//		return t.base.Stop(ctx, func() { close(t.work) })
//	}
//
// New sets t.base.Name ("mine": every error starts with it); Describe,
// Probe, UnregisterMemory (t.base.UnregisterMemory, then wait for
// Drained) and Stats (t.base.Outcomes.Export) complete the interface.
// example_test.go runs a small complete one; plugins/tcp and plugins/shm
// are real ones.
package kit
