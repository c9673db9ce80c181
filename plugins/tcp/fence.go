package tcp

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Fence is sdk.Fencer: no write frame of a connection whose hello named
// engine from and its plugin run is applied here any more, and no new
// connection of that run is accepted. A write frame being read into a
// region when the fence comes finishes, or has its connection shut down
// if it does not finish within the cut (kit.Fences); Fence returns once
// none is being applied. The dialer's name and run are bound to its
// proof when the engines share a cluster secret, so only the engine that
// dialed can fence its connections (its host authenticated the request).
func (t *Transport) Fence(ctx context.Context, from string, run uint64) (sdk.FenceResult, error) {
	r, err := t.fences.Fence(ctx, from, run)
	if err == nil {
		t.stats.fences.Add(1)
		t.log.Info("fenced a peer's plugin run: nothing it sent is applied from now on", "from", from, "run", run,
			"connections", r.Connections, "known", r.Known)
	}
	return r, err
}

// serveFence answers a connection whose hello asked to fence the
// dialer's connection of epoch sc.dialerEpoch (FlagFence): the dialer
// gave that connection up with writes unanswered, and completes them
// only once this says that nothing more of it is applied. One Response
// answers it: StatusOK (Length: the connections fenced), or why not.
func (sc *serverConn) serveFence() {
	t := sc.t
	st := ring.StatusOK
	var n int
	switch {
	case sc.peer.name == "" || sc.dialerRun == 0 || sc.dialerEpoch == 0:
		st = ring.StatusInvalid
	default:
		ctx, cancel := context.WithTimeout(t.ctx, t.set.ioTimeout)
		r, err := t.fences.FenceEpoch(ctx, sc.peer.name, sc.dialerRun, sc.dialerEpoch)
		cancel()
		switch {
		case errors.Is(err, sdk.ErrFenceNotYours):
			st = ring.StatusPermission
		case err != nil:
			st = ring.StatusIO
		default:
			n = r.Connections
			t.stats.fences.Add(1)
		}
		t.log.Debug("fenced a connection its dialer gave up", "from", sc.peer.name, "run", sc.dialerRun, "epoch", sc.dialerEpoch,
			"connections", n, "status", st.String(), "error", err)
	}
	var b [ResponseSize]byte
	EncodeResponse(b[:], &Response{Status: st, Length: uint64(n)})
	_ = sc.link.nc.SetWriteDeadline(time.Now().Add(t.set.ioTimeout))
	_, _ = sc.link.nc.Write(b[:])
}

// shutdown shuts a connection down in both directions, which ends a
// read blocked on it in any goroutine or thread (a priority reader's
// ppoll too), unlike closing its descriptor under it.
func shutdown(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		if rc, err := tc.SyscallConn(); err == nil {
			_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
			return
		}
	}
	_ = nc.Close()
}

// hasWrite reports whether list (ops in wire order) holds a write.
func hasWrite(list *op) bool {
	for o := list; o != nil; o = o.next {
		if o.kind == ring.OpWrite {
			return true
		}
	}
	return false
}

// peerClosed reports whether err, what broke a connection, shows that
// the peer's end of it is gone (it closed or reset it, or its process
// died): nothing more of it can be applied there, so it needs no fence.
func peerClosed(err *error) bool {
	if err == nil {
		return false
	}
	e := *err
	return errors.Is(e, io.EOF) || errors.Is(e, io.ErrUnexpectedEOF) || errors.Is(e, syscall.ECONNRESET) || errors.Is(e, syscall.EPIPE)
}

// fenceThenComplete completes list, the ops of connection cc that this
// side gave up while they were unanswered, with st once the peer fenced
// cc (fenceRemote), asking again with backoff until it does. Meanwhile
// the host sees them in flight: a task that ends by its deadline is held
// until then, and a peer that never answers is resolved by the host
// (end_grace kills this run, and the host fences the whole run at the
// peer's engine). A closed peer or a stopping plugin completes them
// StatusShutdown. Owned by the slot's peer (p.wg) and the transport.
func (s *slot) fenceThenComplete(cc *clientConn, list *op, st ring.Status) {
	t, p := s.t, s.p
	defer t.base.Goroutines.Done()
	defer p.wg.Done()
	backoff := 50 * time.Millisecond
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for !s.fenceRemote(cc) {
		timer.Reset(backoff)
		select {
		case <-timer.C:
		case <-p.ctx.Done():
			t.completeList(list, ring.StatusShutdown)
			return
		}
		backoff = min(2*backoff, time.Second)
	}
	t.stats.connsFenced.Add(1)
	t.completeList(list, st)
}

// fenceRemote asks the peer, over a new connection to the address cc
// used, to fence cc (a hello with FlagFence): true once it answered that
// nothing more of cc is applied, or once that address shows that the
// peer's life that held cc is gone (nothing listens, or another
// incarnation answers).
func (s *slot) fenceRemote(cc *clientConn) bool {
	p, t := s.p, s.t
	d := net.Dialer{Timeout: t.set.ioTimeout}
	nc, err := d.DialContext(p.ctx, "tcp", cc.addr)
	if err != nil {
		return errors.Is(err, syscall.ECONNREFUSED)
	}
	defer nc.Close()
	_, st, _ := s.hello(nc, cc.epoch, true)
	switch st {
	case ring.StatusOK:
	case ring.StatusStaleIncarnation:
		return true
	default:
		return false
	}
	_ = nc.SetReadDeadline(time.Now().Add(t.set.ioTimeout))
	var b [ResponseSize]byte
	if _, err := io.ReadFull(nc, b[:]); err != nil {
		return false
	}
	var r Response
	if err := DecodeResponse(b[:], &r); err != nil {
		return false
	}
	return r.Status == ring.StatusOK
}
