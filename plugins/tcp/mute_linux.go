package tcp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Muting the runtime's poller for a reader that waits on its own thread.
//
// A net.Conn's socket is registered with the Go runtime's epoll instance
// for input and output, edge triggered, for as long as it is open. A
// reader that waits in ppoll(2) on its own thread (prio.go) does not use
// that registration for input, yet every frame that arrives still wakes
// the runtime's thread parked in epoll_wait, whenever one is (the plugin
// always has goroutines waiting in the poller: its control connection,
// its listener): that thread wakes, finds no goroutine waiting for the
// socket and parks again. On a 2-vCPU PVM guest that was one context
// switch a request more in the listener's plugin, on the core where the
// host's waiter spins, for 4 KiB tcp writes one at a time (ferry bench
// --transport tcp --size 4KiB; 2026-12-06).
//
// muteInput takes input out of the socket's registration, keeping output
// (a blocked write still waits in the poller) and the peer's hangup, and
// the registration's data, the runtime's own, as it was; restore puts
// input back as it was. Edge-triggered epoll re-checks the socket when an
// entry is modified, so input that arrived while muted is reported at the
// restore: nothing is lost.
//
// The runtime's epoll instance is not exported: muteInput finds the
// instance that holds the socket by reading /proc/self/fdinfo (the
// kernel lists each epoll instance's entries there: target descriptor,
// events, data). Where that fails (no /proc, a runtime that polls
// otherwise) it changes nothing and restore does nothing: the reader
// works as before, with the extra wakeup. The modification runs inside
// RawConn.Control, which holds the descriptor open, so its number cannot
// be reused by another socket meanwhile.

// pollInput is what muteInput takes out of the events: readiness for
// reading (EPOLLIN, and EPOLLRDNORM where a registration has it).
const pollInput = unix.EPOLLIN | unix.EPOLLRDNORM

// runtimeEpoll caches the descriptor of the epoll instance the runtime
// registers sockets with, once found (-1: not yet).
var runtimeEpoll atomic.Int64

func init() { runtimeEpoll.Store(-1) }

// muteInput mutes the poller's input events for nc's socket, and returns
// the function that restores them (a no-op where nothing was muted).
func muteInput(nc interface{}) (restore func()) {
	rc := rawConnOf(nc)
	if rc == nil {
		return func() {}
	}
	var ep int
	var ev unix.EpollEvent
	muted := false
	_ = rc.Control(func(fd uintptr) {
		var ok bool
		ep, ev, ok = findRegistration(int(fd))
		if !ok || ev.Events&pollInput == 0 {
			return
		}
		quiet := ev
		quiet.Events &^= pollInput
		muted = unix.EpollCtl(ep, unix.EPOLL_CTL_MOD, int(fd), &quiet) == nil
	})
	if !muted {
		return func() {}
	}
	return func() {
		// A closed connection has left the instance: Control fails,
		// and there is nothing to restore.
		_ = rc.Control(func(fd uintptr) {
			_ = unix.EpollCtl(ep, unix.EPOLL_CTL_MOD, int(fd), &ev)
		})
	}
}

// findRegistration returns the epoll instance that holds fd and fd's
// entry in it.
func findRegistration(fd int) (ep int, ev unix.EpollEvent, ok bool) {
	if e := int(runtimeEpoll.Load()); e >= 0 {
		if ev, ok = epollEntry(e, fd); ok {
			return e, ev, true
		}
	}
	dir, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, ev, false
	}
	for _, d := range dir {
		e, err := strconv.Atoi(d.Name())
		if err != nil || e == fd {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + d.Name()); err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		if ev, ok = epollEntry(e, fd); ok {
			runtimeEpoll.Store(int64(e))
			return e, ev, true
		}
	}
	return 0, ev, false
}

// epollEntry reads fd's entry in epoll instance ep from
// /proc/self/fdinfo/ep, whose lines read
// "tfd: FD events: HEX data: HEX  pos:... ino:... sdev:...".
func epollEntry(ep, fd int) (unix.EpollEvent, bool) {
	var ev unix.EpollEvent
	b, err := os.ReadFile("/proc/self/fdinfo/" + strconv.Itoa(ep))
	if err != nil {
		return ev, false
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("tfd:")) {
			continue
		}
		var tfd int
		var events uint32
		var data uint64
		if n, _ := fmt.Sscanf(string(line), "tfd: %d events: %x data: %x", &tfd, &events, &data); n != 3 || tfd != fd {
			continue
		}
		ev.Events = events
		// The kernel's u64 data starts at EpollEvent's Fd on every
		// architecture (amd64 packs the struct, arm64 pads before it).
		binary.NativeEndian.PutUint64((*[8]byte)(unsafe.Pointer(&ev.Fd))[:], data)
		return ev, true
	}
	return ev, false
}
