package remotes

import (
	"bytes"
	"context"

	"github.com/ferrydev/ferry/sdk"
)

// reopenMoved re-opens h's peer, in every transport that has it open,
// whose endpoint in the refreshed descriptor differs from the one it was
// opened with: the peer's plugin restarted and listens elsewhere now
// (shm's socket, tcp's port), and a plugin that keeps the old endpoint
// would never reach it again. It returns h's Opened, with the transports
// that refused the new endpoint cleared. A peer engine republishes its
// descriptor only once the restarted plugin has every registration back,
// so the new endpoint is never reached before it can serve.
func (t *Table) reopenMoved(ctx context.Context, h *Handle, next map[string][]byte, ts []Transport) []bool {
	opened := h.Opened
	for i, tr := range ts {
		if i >= len(opened) || !opened[i] || !tr.Usable() {
			continue
		}
		ep, ok := next[tr.Name()]
		if !ok || bytes.Equal(ep, h.Desc.Transports[tr.Name()]) {
			continue
		}
		if &opened[0] == &h.Opened[0] {
			opened = append([]bool(nil), h.Opened...)
		}
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		_ = tr.ClosePeer(cctx, h.ID) // what it had in flight fails; the old endpoint is gone anyway
		err := tr.OpenPeer(cctx, sdk.Peer{ID: h.ID, Segment: h.Name, Incarnation: h.Desc.Incarnation, MachineID: h.Desc.MachineID, Endpoint: ep})
		cancel()
		if err != nil {
			opened[i] = false
		}
	}
	return opened
}
