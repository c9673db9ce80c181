package tcp

import (
	"context"
	"net"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
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
