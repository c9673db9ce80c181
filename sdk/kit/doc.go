// Package kit is the scaffolding every transport plugin repeats, for a
// vendor to compose into its own sdk.Transport: the lifecycle guards
// (Start once, nothing after Stop, Stop more than once), the region table
// with its checks, the table of open peers, the goroutines Stop waits for,
// the outcome counters, the checks Submit starts with (Admit, Local), the
// decoding and range checks of a `config { ... }` block (Settings) and the
// machine id to publish (MachineID). Base is generic over the plugin's
// region type and per-peer state, so the data path reads them without
// type assertions or allocations.
//
// It owns no goroutines of its own beyond Stop's wait, no sockets and no
// wire format: what a transport does with a descriptor stays in the
// plugin. It must not import the host (sdk/layering_test.go).
//
// A plugin in twenty lines (errors and Stats left out):
//
//	type region struct {
//		regtable.Ref
//		mem []byte
//	}
//
//	func (r *region) Bytes() []byte { return r.mem }
//
//	type peer struct{ addr string }
//
//	type Transport struct{ base kit.Base[*region, *peer] }
//
//	func New() *Transport { return &Transport{base: kit.Base[*region, *peer]{Name: "mine"}} }
//
//	func (t *Transport) Start(_ context.Context, cfg sdk.StartConfig) (sdk.Endpoint, error) {
//		return []byte("addr"), t.base.Start(cfg, func() error { return nil })
//	}
//
//	func (t *Transport) RegisterMemory(_ context.Context, r sdk.Region) error {
//		return t.base.RegisterMemory(r, func(r sdk.Region) *region {
//			g := &region{mem: r.Mem}
//			g.Init()
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
//	func (t *Transport) Submit(d *ring.Descriptor, c sdk.Completer) {
//		p, ok := t.base.Admit(d, c)
//		if !ok {
//			return
//		}
//		r, mem, ok := t.base.Local(d, c)
//		if !ok {
//			return
//		}
//		go func() { // a real plugin queues to its own goroutines
//			n := send(p.addr, mem)
//			r.Release()
//			t.base.Outcomes.Count(ring.StatusOK)
//			c.Complete(d.Token, ring.StatusOK, n)
//		}()
//	}
//
//	func (t *Transport) Stop(ctx context.Context) error { return t.base.Stop(ctx, nil) }
//
// UnregisterMemory, ClosePeer and Stats follow the same way; plugins/tcp
// and plugins/shm are complete examples.
package kit
