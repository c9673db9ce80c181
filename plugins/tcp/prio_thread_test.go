package tcp_test

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// threadsInPpoll counts this process's threads blocked in ppoll(2), by
// the system call number /proc/self/task/*/syscall shows: the priority
// readers' waits (the Go runtime's own poller waits in epoll_pwait).
func threadsInPpoll(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%s/syscall", e.Name()))
		if err != nil {
			continue // the thread ended
		}
		f := bytes.Fields(b)
		if len(f) == 0 {
			continue
		}
		if nr, err := strconv.Atoi(string(f[0])); err == nil && nr == unix.SYS_PPOLL {
			n++
		}
	}
	return n
}

// mutedInPoller counts the entries of this process's epoll instances (the
// Go runtime's poller) that wait for output but not for input: the
// sockets of readers that wait in ppoll (mute_linux.go).
func mutedInPoller(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		b, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue
		}
		for _, line := range bytes.Split(b, []byte("\n")) {
			var fd int
			var events uint32
			if k, _ := fmt.Sscanf(string(line), "tfd: %d events: %x", &fd, &events); k == 2 && events&unix.EPOLLOUT != 0 && events&unix.EPOLLIN == 0 {
				n++
			}
		}
	}
	return n
}

// TestPriorityReadersWaitOnTheirThreads: with priority_thread (the
// default) the readers of a priority connection, the dialer's response
// reader and the listener's serving goroutine, each wait for input in
// ppoll on a thread of their own once a high-priority read has gone
// over it, their sockets' input muted in the runtime's poller, and the
// reads keep completing; with priority_thread = false no thread waits
// so, nothing is muted, and the reads complete the same.
func TestPriorityReadersWaitOnTheirThreads(t *testing.T) {
	if _, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/syscall"); err != nil {
		t.Skipf("no /proc/<tid>/syscall here: %v", err)
	}
	for _, c := range []struct {
		config string
		want   int
	}{
		{``, 2},
		{`priority_thread = false`, 0},
	} {
		t.Run(fmt.Sprintf("%q", c.config), func(t *testing.T) {
			w := newWorld(t, 1<<16, "connections_per_peer = 1\n"+c.config)
			for i := range 3 {
				d := read(aDst, 0, bRO, uint64(i)*4096, 4096)
				d.Prio = uint8(sdk.PriorityHigh)
				if got := w.do(t, d); got.Status != ring.StatusOK || got.N != 4096 {
					t.Fatalf("high read %d: %v (%d bytes)", i, got.Status, got.N)
				}
				plugintest.MustEqual(t, "high read", w.dst[:4096], w.ro[i*4096:(i+1)*4096])
			}
			if got := w.a.stat(t, "ops_priority"); got != 3 {
				t.Errorf("ops_priority = %d, want 3", got)
			}
			// Both readers go back to their wait after the last read;
			// look until they are there (the limit is a safety net).
			n := threadsInPpoll(t)
			for limit := time.Now().Add(waitLimit); n < c.want && time.Now().Before(limit); n = threadsInPpoll(t) {
				time.Sleep(time.Millisecond)
			}
			if n != c.want {
				t.Errorf("%d threads wait in ppoll, want %d", n, c.want)
			}
			// Their sockets' input wakes them alone: it is muted in the
			// runtime's poller, every other socket's is not.
			if m := mutedInPoller(t); m != c.want {
				t.Errorf("%d sockets' input muted in the runtime's poller, want %d", m, c.want)
			}
		})
	}
}
