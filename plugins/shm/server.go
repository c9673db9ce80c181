package shm

import (
	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/ring"
	sdkshm "github.com/ferrydev/ferry/sdk/shm"
)

// answer replies to a query for region id: its memfd, length and
// permission if peers may use it, or why not. The write lock is held from
// the lookup to the end of the write, so that a revoke of this region
// (UnregisterMemory) goes out after the fd and the fd is still open while
// it is sent.
func (t *Transport) answer(sc *samehost.ServerConn, id uint32) error {
	sc.Lock()
	defer sc.Unlock()
	reply := msg{Type: msgRegion, Region: id}
	fd := -1
	var err error
	unshareable := false
	t.mu.Lock()
	r := t.base.Regions.Lookup(id)
	switch {
	case r == nil:
		reply.Status = ring.StatusNotRegistered
	case !r.Perm.AllowsRemoteRead():
		reply.Status = ring.StatusPermission // local-only: its fd never leaves
	case r.fd < 0:
		reply.Status = ring.StatusUnsupported // the host sent no memfd to share
	case !r.exact:
		// Its memfd holds more than the region (a range that does not
		// start and end on page boundaries of its allocation): handing
		// it over would hand over memory that was not registered.
		reply.Status = ring.StatusUnsupported
		unshareable = true
	default:
		fd = r.fd
		if !r.Perm.AllowsRemoteWrite() {
			// A remote-read region goes as a read-only descriptor: the
			// peer cannot map it writable.
			if fd, err = t.readOnlyFD(r); err != nil {
				reply.Status = ring.StatusIO
				break
			}
		}
		reply.Status, reply.Perm, reply.Gen = ring.StatusOK, r.Perm, r.gen
		reply.Off, reply.Length = 0, uint64(len(r.Mem))
		sc.Hold(id, r.gen)
	}
	t.mu.Unlock()
	if unshareable {
		t.log.Info("a peer asked for a region whose memory is not page-aligned in its allocation: it cannot be shared alone, so it is not shared; "+
			"register buffers that start and end on page boundaries of their allocation (or whole allocations) for shm, or let another transport reach it",
			"region", id)
	} else if err != nil {
		t.log.Warn("cannot open a read-only descriptor of a region for a peer", "region", id, "error", err)
	}
	if reply.Status == ring.StatusOK {
		t.stats.QueriesServed.Add(1)
	} else {
		t.stats.QueriesRefused.Add(1)
	}
	return sc.SendLocked(reply, fd)
}

// readOnlyFD returns r's fd reopened O_RDONLY, opening it on first use;
// t.mu held.
func (t *Transport) readOnlyFD(r *region) (int, error) {
	if r.ro < 0 {
		fd, err := sdkshm.ReadOnly(r.fd)
		if err != nil {
			return -1, err
		}
		r.ro = fd
		t.readOnly[r] = struct{}{}
	}
	return r.ro, nil
}
