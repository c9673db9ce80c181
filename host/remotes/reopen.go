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
// would never reach it again. It also opens the peer in a transport that
// does not have it open and that the refreshed descriptor offers: the
// handle was opened, or refreshed, while the peer's plugin was down and
// its descriptor left it out, and without this the handle would never
// reach the peer through it again. It returns h's Opened, with the
// transports that refused the new endpoint cleared and those that took
// it set. A peer engine republishes its descriptor only once the
// restarted plugin has every registration back, so the new endpoint is
// never reached before it can serve.
func (t *Table) reopenMoved(ctx context.Context, h *Handle, next map[string][]byte, ts []Transport) []bool {
	opened := h.Opened
	for i, tr := range ts {
		if i >= len(opened) || !tr.Usable() {
			continue
		}
		ep, ok := next[tr.Name()]
		switch {
		case !ok:
			continue
		case opened[i] && bytes.Equal(ep, h.Desc.Transports[tr.Name()]):
			continue
		case !opened[i] && tr.SameMachineOnly() && h.Desc.MachineID != t.machineID:
			continue
		}
		if &opened[0] == &h.Opened[0] {
			opened = append([]bool(nil), h.Opened...)
		}
		cctx, cancel := context.WithTimeout(ctx, t.timeout)
		if opened[i] {
			_ = tr.ClosePeer(cctx, h.ID) // what it had in flight fails; the old endpoint is gone anyway
		}
		err := tr.OpenPeer(cctx, sdk.Peer{ID: h.ID, Segment: h.Name, Incarnation: h.Desc.Incarnation, MachineID: h.Desc.MachineID, Endpoint: ep})
		cancel()
		opened[i] = err == nil
	}
	return opened
}
