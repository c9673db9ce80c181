//go:build linux

package tcp

import (
	"bytes"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// registration returns nc's entry in the runtime's epoll instance.
func registration(t *testing.T, nc net.Conn) unix.EpollEvent {
	t.Helper()
	var ev unix.EpollEvent
	ok := false
	if err := rawConnOf(nc).Control(func(fd uintptr) { _, ev, ok = findRegistration(int(fd)) }); err != nil || !ok {
		t.Fatalf("no poller registration found for the socket (%v)", err)
	}
	return ev
}

// TestMuteInput: muting takes input, and only input, out of the socket's
// registration in the runtime's poller, keeping its data (the runtime's
// own); restoring puts the registration back as it was.
func TestMuteInput(t *testing.T) {
	a, _ := tcpPair(t)
	before := registration(t, a)
	if before.Events&unix.EPOLLIN == 0 || before.Events&unix.EPOLLOUT == 0 {
		t.Fatalf("the runtime registered events %#x, want input and output", before.Events)
	}
	restore := muteInput(a)
	muted := registration(t, a)
	if muted.Events != before.Events&^pollInput {
		t.Errorf("muted events %#x, want %#x", muted.Events, before.Events&^pollInput)
	}
	if muted.Fd != before.Fd || muted.Pad != before.Pad {
		t.Errorf("muting changed the registration's data: %#x %#x, was %#x %#x", muted.Fd, muted.Pad, before.Fd, before.Pad)
	}
	restore()
	if after := registration(t, a); after != before {
		t.Errorf("restored registration %+v, want %+v", after, before)
	}
	restore() // a second restore changes nothing
	if after := registration(t, a); after != before {
		t.Errorf("restored twice: %+v, want %+v", after, before)
	}
}

// TestMutedInputNotLost: a goroutine that waits in the poller for input
// that arrived while the socket's input was muted gets it once restore
// re-arms the registration.
func TestMutedInputNotLost(t *testing.T) {
	a, b := tcpPair(t)
	restore := muteInput(a)
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 5)
		_ = a.SetReadDeadline(time.Now().Add(waitLimitInternal))
		n, _ := a.Read(buf)
		got <- buf[:n]
	}()
	// The input goes out once the reader waits in the poller, where only
	// the restore can wake it for that input.
	for limit := time.Now().Add(waitLimitInternal); !parkedInPoller("TestMutedInputNotLost.func1"); {
		if time.Now().After(limit) {
			t.Fatal("the reader never waited in the poller")
		}
		runtime.Gosched()
	}
	if _, err := b.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	restore()
	if g := <-got; !bytes.Equal(g, []byte("hello")) {
		t.Fatalf("read %q after the restore, want %q", g, "hello")
	}
}

// TestMuteClosedConn: muting or restoring a closed connection changes
// nothing and does not fail.
func TestMuteClosedConn(t *testing.T) {
	a, _ := tcpPair(t)
	restore := muteInput(a)
	a.Close()
	restore()
	muteInput(a)() // closed: nothing to mute
}

// parkedInPoller reports whether a goroutine running fn waits in the
// runtime's poller.
func parkedInPoller(fn string) bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	for _, g := range bytes.Split(buf, []byte("\n\n")) {
		if bytes.Contains(g, []byte(fn)) && bytes.Contains(g, []byte("runtime_pollWait")) {
			return true
		}
	}
	return false
}

// waitLimitInternal bounds a wait that only a broken build reaches.
const waitLimitInternal = 20 * time.Second
