package tcp

import (
	"io"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// rawReader reads with readv(2) on the socket's descriptor, through the
// runtime poller (so deadlines and Close work as for net.Conn.Read). Its
// closure is built once so that a read allocates nothing.
type rawReader struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool
	iov   [2]syscall.Iovec
	cnt   uintptr
	wait  bool // on EAGAIN, wait for readiness (false: return at once)
	n     int
	errno syscall.Errno
	// stop, while set (setStop), is looked at before each system call:
	// once it is true, readv reads nothing (and reports nothing there).
	// busy is true from just before that look until the call returns, so
	// that quiesce can wait out a call that looked before stop was set.
	stop *atomic.Bool
	busy atomic.Bool
	// block, while set (setBlock), makes a waiting readv wait in ppoll(2)
	// on the calling thread instead of in the runtime's poller: the
	// arrival of data wakes that thread itself (prio.go, priority_thread).
	// A wait lasts until input, the read deadline (deadline, mono time;
	// 0: none) or the socket's shutdown (link.close shuts a blocking
	// reader's socket down), and while stop is set no longer than
	// blockWait; then the runtime looks at the deadline and at Close
	// before the next.
	block    bool
	deadline int64
	// closed is set by link.close before it looks whether the reader
	// blocks (link.blocking, set after block): a reader that starts to
	// block as the link closes sees it and does not wait, since the
	// close may not shut the socket down to wake it.
	closed atomic.Bool
	pfd    [1]unix.PollFd
	ts     unix.Timespec // ppoll's timeout, which the kernel overwrites with the time left
}

// blockWait bounds one ppoll wait of a blocking reader while stop is set
// (a read into memory whose slice may be aborted): how late it sees the
// abort, which does not wake it. Any other wait has no bound of its own:
// an idle connection's reader then costs no wakeup (four a second
// before, each followed by some sixty of the runtime's sysmon, which
// takes back the P of a thread that stays in a system call).
const blockWait = 250 * time.Millisecond

func newRawReader(nc interface{}) *rawReader {
	rc := rawConnOf(nc)
	if rc == nil {
		return nil
	}
	r := &rawReader{rc: rc}
	r.fn = func(fd uintptr) bool {
		if r.stop != nil {
			r.busy.Store(true) // before the look: see quiesce
			if r.stop.Load() {
				r.busy.Store(false)
				r.n, r.errno = 0, syscall.EAGAIN
				return true
			}
		}
		n, _, e := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&r.iov[0])), r.cnt)
		if r.stop != nil {
			r.busy.Store(false)
		}
		if e == syscall.EAGAIN && r.wait {
			if !r.block {
				return false
			}
			// Wait on this thread; readv comes back (EAGAIN) for the
			// runtime to look at the deadline and at Close before the
			// next system call.
			wait := int64(-1) // none
			if r.stop != nil {
				wait = int64(blockWait)
			}
			if r.deadline != 0 {
				left := max(r.deadline-mono(time.Now()), 0)
				if wait < 0 || left < wait {
					wait = left
				}
			}
			r.pfd[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}
			switch {
			case r.closed.Load():
				runtime.Gosched() // the close is under way: let it run
			case wait < 0:
				_, _ = unix.Ppoll(r.pfd[:], nil, nil)
			default:
				r.ts = unix.NsecToTimespec(wait)
				_, _ = unix.Ppoll(r.pfd[:], &r.ts, nil)
			}
		}
		r.n, r.errno = int(n), e
		return true
	}
	return r
}

// setBlock turns waiting in ppoll on the calling thread on or off. Only
// the reading goroutine calls it.
func (r *rawReader) setBlock(on bool) { r.block = on }

// markClosed tells the reader that its link is closing (link.close).
func (r *rawReader) markClosed() { r.closed.Store(true) }

// setDeadline tells a blocking reader the read deadline (zero: none), so
// that its waits end by then. Only the reading goroutine calls it.
func (r *rawReader) setDeadline(t time.Time) {
	r.deadline = 0
	if !t.IsZero() {
		r.deadline = max(mono(t), 1)
	}
}

// setStop makes readv look at s before each system call, until
// setStop(nil). Only the reading goroutine calls it.
func (r *rawReader) setStop(s *atomic.Bool) { r.stop = s }

// quiesce returns once no system call that looked at stop before it was
// set is still running: the caller set stop, and from now on nothing is
// read into the memory readv was given. The calls do not block (the
// socket is non-blocking), so the wait is short.
func (r *rawReader) quiesce() {
	for r.busy.Load() {
		runtime.Gosched()
	}
}

// readv reads into a, then b, in one system call. It returns 0, nil when
// wait is false and nothing is there.
func (r *rawReader) readv(a, b []byte, wait bool) (int, error) {
	r.iov[0].Base, r.cnt = &a[0], 1
	r.iov[0].SetLen(len(a))
	if len(b) > 0 {
		r.iov[1].Base, r.cnt = &b[0], 2
		r.iov[1].SetLen(len(b))
	}
	r.wait = wait
	for {
		r.n, r.errno = 0, 0
		if err := r.rc.Read(r.fn); err != nil {
			r.iov = [2]syscall.Iovec{}
			return 0, err
		}
		// A blocking reader's wait came back empty: look again, unless
		// stop is set (readFullNextUnless looks at it between calls).
		again := r.errno == syscall.EAGAIN && wait && (r.stop == nil || !r.stop.Load())
		if r.errno != syscall.EINTR && !again {
			break
		}
	}
	r.iov = [2]syscall.Iovec{} // hold no pointers into memory that may be unregistered
	switch {
	case r.errno == syscall.EAGAIN:
		return 0, nil
	case r.errno != 0:
		return 0, os.NewSyscallError("readv", r.errno)
	case r.n == 0:
		return 0, io.EOF
	}
	raceWriteRange(a, b, r.n)
	return r.n, nil
}

// rawWriter writes with writev(2) on the socket's descriptor without ever
// waiting for room: the submitting goroutine sends small frames itself and
// must not block on the network (see slot.trySend). Like rawReader it
// allocates nothing per call.
type rawWriter struct {
	rc    syscall.RawConn
	fn    func(fd uintptr) bool
	iov   [2 * maxBatch]syscall.Iovec
	cnt   uintptr
	n     int
	errno syscall.Errno
}

func newRawWriter(nc interface{}) *rawWriter {
	rc := rawConnOf(nc)
	if rc == nil {
		return nil
	}
	w := &rawWriter{rc: rc}
	w.fn = func(fd uintptr) bool {
		n, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&w.iov[0])), w.cnt)
		w.n, w.errno = int(n), e
		return true // never wait: EAGAIN means the caller hands the rest on
	}
	return w
}

// writev writes what the socket takes now of v (at most 2*maxBatch buffers)
// in one system call and returns how many bytes that was; 0, nil when the
// socket has no room.
func (w *rawWriter) writev(v [][]byte) (int, error) {
	w.cnt = 0
	for _, b := range v {
		if len(b) == 0 {
			continue
		}
		w.iov[w.cnt].Base = &b[0]
		w.iov[w.cnt].SetLen(len(b))
		w.cnt++
	}
	if w.cnt == 0 {
		return 0, nil
	}
	for {
		w.n, w.errno = 0, 0
		if err := w.rc.Write(w.fn); err != nil {
			clear(w.iov[:w.cnt])
			return 0, err
		}
		if w.errno != syscall.EINTR {
			break
		}
	}
	clear(w.iov[:w.cnt]) // hold no pointers into memory that may be unregistered
	switch {
	case w.errno == syscall.EAGAIN:
		return 0, nil
	case w.errno != 0:
		return 0, os.NewSyscallError("writev", w.errno)
	}
	return w.n, nil
}

// rawConnOf returns nc's raw connection, nil when it has none (a conn
// that wraps the socket, as TLS does): raw I/O is then not available.
func rawConnOf(nc interface{}) syscall.RawConn {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}
