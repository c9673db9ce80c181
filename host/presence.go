package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/ferrydev/ferry/config"

	"github.com/ferrydev/ferry/host/publish"
	"github.com/ferrydev/ferry/host/segment"
)

// descriptor builds the local descriptor from what runs now: the
// registered buffers and each usable plugin's endpoint and rails. It
// reads only lock-free state.
func (e *Engine) descriptor() *segment.Descriptor {
	self := publish.Self{Name: e.name, Incarnation: e.incarnation, MachineID: e.machineID, Topology: e.topo}
	self.Control = e.controlAddr
	var eps []publish.Endpoint
	for _, ps := range e.x.Plugins() {
		if !ps.Usable() {
			continue
		}
		ep := publish.Endpoint{Transport: ps.Name(), Endpoint: ps.Endpoint()}
		if rs := ps.Rails(); rs != nil {
			for _, ri := range rs.Rails() {
				ep.Rails = append(ep.Rails, segment.RailInfo{Name: ri.Name, Label: ri.Label, NUMANode: ri.NUMANode, BandwidthGbps: ri.NominalGbps})
			}
		}
		eps = append(eps, ep)
	}
	d := publish.Descriptor(self, append(e.mem.Buffers(), e.devs.Buffers()...), eps)
	if pool, _ := e.x.StagingPool(); pool != nil {
		d.StagingSlot = pool.SlotSize()
	}
	return d
}

// publish writes the local descriptor to the metastore, bound to a lease
// that the metastore keeps alive while this engine runs: a dead engine's
// descriptor expires within the configured TTL. After the first, a
// metastore outage does not fail it (see publish.Publisher).
func (e *Engine) publish(ctx context.Context) error {
	err := e.pub.Publish(ctx)
	if errors.Is(err, publish.ErrNameInUse) {
		return asKind(ErrInvalid, err)
	}
	return err
}

// openSigner returns the signer of descriptors under the engine's
// cluster secret; nil without one (New then warns, once, of what is open).
func openSigner(secret []byte, cfg *config.Config) (*segment.Signer, error) {
	if secret == nil {
		return nil, nil
	}
	s, err := segment.NewSigner(secret)
	if err != nil {
		return nil, fmt.Errorf("engine %q: cluster secret: %w", cfg.Name, err)
	}
	return s, nil
}
