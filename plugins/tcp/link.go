package tcp

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"time"
)

// epoch anchors the monotonic progress stamps.
var epoch = time.Now()

func mono(now time.Time) int64 { return int64(now.Sub(epoch)) }

// link is one TCP connection with io_timeout enforced as "no byte moved in
// either direction for io_timeout while work is in progress": a 64 MiB frame
// on a slow path is not cut off, a stalled peer is.
//
// Deadlines are re-armed lazily (only when less than half of io_timeout is
// left), so a stream of small frames does not reset a timer per frame. The
// reading and the writing side are each owned by one goroutine at a time
// (on the dialer, the writing side by whoever holds the slot's send lock);
// rdl and wdl belong to those owners.
type link struct {
	nc       net.Conn
	ioTO     time.Duration
	progress atomic.Int64 // mono time of the last byte moved, or of the start of an operation
	rdl, wdl time.Time    // read / write deadline currently set on nc
	raw      *rawReader   // readv on the descriptor; nil where unavailable
	rw       *rawWriter   // non-waiting writev; set by the dialer, nil elsewhere or where unavailable
	// chunk, when above 0, bounds the payload bytes one read or write
	// system call moves (a bulk connection's, prio.go: bulk_chunk); sub
	// is writeBuffers' view of the next chunk.
	chunk int
	sub   [2*maxBatch + 1][]byte
	// blocking is set while the reading goroutine waits in the kernel on
	// its own thread (setBlock): close then shuts the socket down first,
	// which wakes that wait at once.
	blocking atomic.Bool
	shut     atomic.Bool // close shut the socket down: the reader's EOF is the close's
	closed   atomic.Bool // close was called: nothing read ahead is served any more (ahead.go)
}

// setBlock has the reading goroutine, locked to its thread, wait for
// input in the kernel on that thread instead of in the runtime's poller
// (prio.go, priority_thread), or no longer. Only the reader calls it.
func (l *link) setBlock(on bool) {
	if l.raw == nil {
		return
	}
	l.raw.setBlock(on)
	l.blocking.Store(on)
}

// read reads into b as net.Conn.Read does, through the raw reader while
// it blocks on the reading thread.
func (l *link) read(b []byte) (int, error) {
	if l.blocking.Load() {
		return l.rawRead(b, nil)
	}
	return l.nc.Read(b)
}

// rawRead reads into a and then b with one readv, waiting for input
// (raw reader only).
func (l *link) rawRead(a, b []byte) (int, error) {
	l.raw.setDeadline(l.rdl)
	n, err := l.raw.readv(a, b, true)
	if err == io.EOF && l.shut.Load() {
		err = net.ErrClosed // as a read on a closed connection says
	}
	return n, err
}

// close closes the connection; a reader waiting on its own thread is
// woken by the shutdown (its wait has no time bound of its own: a
// blocking link is closed here, never by nc.Close alone). The reader is
// told first, so that one that starts to block meanwhile does not wait.
func (l *link) close() error {
	l.closed.Store(true)
	if l.raw != nil {
		l.raw.markClosed()
	}
	if l.blocking.Load() {
		l.shut.Store(true)
		if rc := rawConnOf(l.nc); rc != nil {
			_ = rc.Control(func(fd uintptr) { _ = syscall.Shutdown(int(fd), syscall.SHUT_RDWR) })
		}
	}
	return l.nc.Close()
}

func newLink(nc net.Conn, ioTimeout time.Duration) *link {
	l := &link{nc: nc, ioTO: ioTimeout, raw: newRawReader(nc)}
	l.progress.Store(mono(time.Now()))
	return l
}

func (l *link) armRead(now time.Time) {
	if l.rdl.IsZero() || l.rdl.Sub(now) < l.ioTO/2 {
		l.rdl = now.Add(l.ioTO)
		_ = l.nc.SetReadDeadline(l.rdl)
	}
}

func (l *link) armWrite(now time.Time) {
	if l.wdl.IsZero() || l.wdl.Sub(now) < l.ioTO/2 {
		l.wdl = now.Add(l.ioTO)
		_ = l.nc.SetWriteDeadline(l.wdl)
	}
}

// stalled decides what a timeout means: if bytes moved (either way) within
// io_timeout the deadline is pushed out and the caller goes on; otherwise
// the connection is stalled. Any other error is returned as is.
func (l *link) stalled(err error, read bool) error {
	if !isTimeout(err) {
		return err
	}
	now := time.Now()
	last := time.Duration(l.progress.Load())
	idle := time.Duration(mono(now)) - last
	if idle >= l.ioTO {
		return errStalled
	}
	dl := epoch.Add(last + l.ioTO)
	if read {
		l.rdl = dl
		_ = l.nc.SetReadDeadline(dl)
	} else {
		l.wdl = dl
		_ = l.nc.SetWriteDeadline(dl)
	}
	return nil
}

var errStalled = errors.New("tcp: no progress for io_timeout")

// cut bounds one system call's read of b (and then next) to l.chunk bytes
// of b: the part of b to read now, and next only when that part is the
// rest of b.
func (l *link) cut(b, next []byte) ([]byte, []byte) {
	if l.chunk > 0 && len(b) > l.chunk {
		return b[:l.chunk], nil
	}
	return b, next
}

// readFull reads exactly len(b) bytes straight into b.
func (l *link) readFull(b []byte) error {
	now := time.Now()
	l.progress.Store(mono(now))
	l.armRead(now)
	for len(b) > 0 {
		part, _ := l.cut(b, nil)
		n, err := l.read(part)
		b = b[n:]
		if n > 0 && len(b) > 0 {
			l.progress.Store(mono(time.Now()))
		}
		if err != nil && len(b) > 0 {
			if err = l.stalled(err, true); err != nil {
				return err
			}
		}
	}
	raceAcquireWire()
	return nil
}

// readFullNext reads exactly len(b) bytes into b and, in the same system
// calls, whatever of next is already there: the listener receives a write's
// payload and the following frame's header together. It returns how many
// bytes of next it got.
func (l *link) readFullNext(b, next []byte) (int, error) {
	if l.raw == nil || len(next) == 0 {
		return 0, l.readFull(b)
	}
	now := time.Now()
	l.progress.Store(mono(now))
	l.armRead(now)
	for len(b) > 0 {
		part, nx := l.cut(b, next)
		n, err := l.rawRead(part, nx)
		if err != nil {
			if err = l.stalled(err, true); err != nil {
				return 0, err
			}
			continue
		}
		if n >= len(b) {
			raceAcquireWire()
			return n - len(b), nil
		}
		b = b[n:]
		l.progress.Store(mono(time.Now()))
	}
	raceAcquireWire()
	return 0, nil
}

// readFullNextUnless is readFullNext that stops reading into b once stop
// is set (it looks before each system call): it returns how many bytes
// of b it read (len(b) unless it stopped) and of next. Without the raw
// reader it reads b whole, as readFullNext does.
func (l *link) readFullNextUnless(b, next []byte, stop *atomic.Bool) (int, int, error) {
	if l.raw == nil {
		if stop.Load() {
			return 0, 0, nil
		}
		n, err := l.readFullNext(b, next)
		return len(b), n, err
	}
	l.raw.setStop(stop)
	defer l.raw.setStop(nil)
	now := time.Now()
	l.progress.Store(mono(now))
	l.armRead(now)
	got := 0
	for got < len(b) {
		if stop.Load() {
			raceAcquireWire()
			return got, 0, nil
		}
		part, nx := l.cut(b[got:], next)
		n, err := l.rawRead(part, nx)
		if err != nil {
			if err = l.stalled(err, true); err != nil {
				return got, 0, err
			}
			continue
		}
		if got+n >= len(b) {
			raceAcquireWire()
			return len(b), got + n - len(b), nil
		}
		got += n
		l.progress.Store(mono(time.Now()))
	}
	raceAcquireWire()
	return got, 0, nil
}

// tryRead reads what is already there of len(b) bytes, without waiting.
func (l *link) tryRead(b []byte) (int, error) {
	if l.raw == nil {
		return 0, nil
	}
	n, err := l.raw.readv(b, nil, false)
	if err != nil && isTimeout(err) {
		return 0, nil // a stale deadline: nothing was read
	}
	if n > 0 {
		raceAcquireWire()
	}
	return n, err
}

// readSome reads at least one byte into b. While idle() holds (nothing
// expected) it waits without limit; once something is expected, io_timeout
// without progress ends it.
func (l *link) readSome(b []byte, idle func() bool) (int, error) {
	for {
		l.armRead(time.Now())
		n, err := l.read(b)
		if n > 0 {
			raceAcquireWire()
			return n, nil // an error comes back again on the next read
		}
		if err == nil {
			continue
		}
		if !isTimeout(err) {
			return 0, err
		}
		if idle() {
			l.rdl = time.Time{} // re-armed at the top
			continue
		}
		if err = l.stalled(err, true); err != nil {
			return 0, err
		}
	}
}

// readIdle waits, without a time limit, for the first bytes of the next
// frame on an idle connection, and reads up to len(b) of them.
func (l *link) readIdle(b []byte) (int, error) {
	for {
		n, err := l.read(b)
		if n > 0 {
			raceAcquireWire()
			return n, nil // an error comes back again on the next read
		}
		if err == nil {
			continue
		}
		if isTimeout(err) {
			// A deadline left over from the previous frame: idle is fine.
			l.rdl = time.Time{}
			_ = l.nc.SetReadDeadline(l.rdl)
			continue
		}
		return 0, err
	}
}

// writeBuffers writes every buffer of *v with one writev per round; v is
// consumed.
func (l *link) writeBuffers(v *net.Buffers) error {
	now := time.Now()
	l.progress.Store(mono(now))
	l.armWrite(now)
	raceReleaseWire()
	for {
		n, err := l.writeSome(v)
		if err == nil {
			if len(*v) == 0 {
				return nil
			}
			continue
		}
		if n > 0 {
			l.progress.Store(mono(time.Now()))
		}
		if err = l.stalled(err, false); err != nil {
			return err
		}
	}
}

// writeSome writes *v, or with a chunk its first chunk bytes, waiting for
// room as needed, and consumes what it wrote from *v.
func (l *link) writeSome(v *net.Buffers) (int64, error) {
	if l.chunk <= 0 {
		return v.WriteTo(l.nc)
	}
	sub := net.Buffers(l.sub[:0])
	left := l.chunk
	for _, b := range *v {
		if left == 0 || len(sub) == len(l.sub) {
			break
		}
		if len(b) > left {
			b = b[:left]
		}
		sub = append(sub, b)
		left -= len(b)
	}
	n, err := sub.WriteTo(l.nc)
	clear(l.sub[:]) // hold no pointers into memory that may be unregistered
	consume(v, n)
	return n, err
}

// consume drops the first n bytes from *v.
func consume(v *net.Buffers, n int64) {
	for len(*v) > 0 && n >= int64(len((*v)[0])) {
		n -= int64(len((*v)[0]))
		(*v)[0] = nil
		*v = (*v)[1:]
	}
	if len(*v) > 0 && n > 0 {
		(*v)[0] = (*v)[0][n:]
	}
}

// tryWriteBuffers writes what the socket takes now of *v, without waiting
// for room, and consumes that from *v. It reports whether all of *v went
// out; what is left is for writeBuffers.
func (l *link) tryWriteBuffers(v *net.Buffers) (bool, error) {
	now := time.Now()
	l.progress.Store(mono(now))
	l.armWrite(now)
	raceReleaseWire()
	n, err := l.rw.writev(*v)
	if err != nil {
		if isTimeout(err) {
			return false, nil // a stale deadline: writeBuffers sorts it out
		}
		return false, err
	}
	for len(*v) > 0 && n >= len((*v)[0]) {
		n -= len((*v)[0])
		(*v)[0] = nil
		*v = (*v)[1:]
	}
	if len(*v) > 0 {
		(*v)[0] = (*v)[0][n:]
		return false, nil
	}
	return true, nil
}

// write writes b with write(2) (a frame without payload: one buffer needs
// no writev).
func (l *link) write(b []byte) error {
	now := time.Now()
	l.progress.Store(mono(now))
	l.armWrite(now)
	raceReleaseWire()
	for {
		n, err := l.nc.Write(b)
		if err == nil {
			return nil
		}
		b = b[n:]
		if n > 0 {
			l.progress.Store(mono(time.Now()))
		}
		if err = l.stalled(err, false); err != nil {
			return err
		}
	}
}

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}
