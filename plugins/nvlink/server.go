package nvlink

import (
	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// answer replies to a query for region id: for device memory its handle
// (exactly the region's range), for host memory its memfd (exactly the
// region; read-only for remote-read), or why not. A local-only region's
// handle or fd never leaves the process. The write lock is held from the
// lookup to the end of the write, so that a revoke goes out after it.
func (t *Transport) answer(sc *samehost.ServerConn, id uint32) error {
	sc.Lock()
	defer sc.Unlock()
	reply := msg{Type: msgRegion, Region: id}
	fd := -1
	t.mu.Lock()
	r := t.base.Regions.Lookup(id)
	switch {
	case r == nil:
		reply.Status = ring.StatusNotRegistered
	case !r.perm.AllowsRemoteRead():
		reply.Status = ring.StatusPermission
	case r.dev != nil:
		reply.Status, reply.Perm, reply.Gen, reply.Length = ring.StatusOK, r.perm, r.gen, r.n
		reply.Device, reply.Handle = true, r.h
		sc.Hold(id, r.gen)
	case r.fd < 0 || !r.exact:
		reply.Status = ring.StatusUnsupported // no memfd of exactly the region to hand over
	default:
		fd = r.fd
		if !r.perm.AllowsRemoteWrite() {
			if r.ro < 0 {
				ro, err := sdkshm.ReadOnly(r.fd)
				if err != nil {
					t.log.Warn("cannot open a read-only descriptor of a region for a peer", "region", id, "error", err)
					reply.Status = ring.StatusIO
					fd = -1
					break
				}
				r.ro = ro
				t.readOnly[r] = struct{}{}
			}
			fd = r.ro
		}
		reply.Status, reply.Perm, reply.Gen, reply.Length = ring.StatusOK, r.perm, r.gen, r.n
		sc.Hold(id, r.gen)
	}
	t.mu.Unlock()
	if reply.Status == ring.StatusOK {
		t.stats.QueriesServed.Add(1)
	} else {
		t.stats.QueriesRefused.Add(1)
	}
	return sc.SendLocked(reply, fd)
}
