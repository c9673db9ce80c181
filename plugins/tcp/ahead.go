package tcp

import (
	"net"
	"sync"
)

// A server connection reads ahead: the system call that reads the rest
// of a small frame also takes whatever of the following frames is already
// on the socket, up to aheadSize bytes, and the next headers and small
// payloads are then copied out of that buffer instead of read one system
// call each. A stream of 4 KiB writes then costs one readv for about a
// dozen frames instead of one each; a copy of 4 KiB from a buffer in
// cache costs far less than the system call it replaces.
//
// A large payload (over aheadSmall) is still read straight into its
// region with only the next header beside it, so bulk writes are not
// copied twice. The buffer is held only while the connection is busy: a
// connection that waits for its next frame with nothing buffered gives
// it back, so thousands of idle connections hold none. The buffers of
// every connection together are bounded by max_receive_buffer, in a
// budget of their own (Transport.ahead; the staging buffers have theirs,
// bounds.go): a connection that finds it full never waits for it, it reads
// with only the next header ahead of a payload, as before the read-ahead.
// A separate budget, because a connection that holds its read-ahead
// buffer may then wait for staging room, which it must not hold up.
const (
	aheadSize  = 64 << 10
	aheadSmall = 16 << 10
)

var aheadPool = sync.Pool{New: func() any { return new([aheadSize]byte) }}

// ahead holds the bytes a server connection read past the frame it is
// serving: mem[r:w]. Only the connection's serving goroutine uses it.
type ahead struct {
	budget *budget           // where buf is counted (try only: it never waits); nil: nowhere (tests)
	buf    *[aheadSize]byte  // nil while idle, or while the budget is full
	small  [RequestSize]byte // what is read ahead while buf is nil
	mem    []byte            // buf's or small's bytes; nil while idle
	r, w   int
	// drained: the last read left room in what it was given, so the
	// socket had nothing more then.
	drained bool
}

func (a *ahead) len() int { return a.w - a.r }

// room returns where the next read may put what follows, the buffered
// bytes moved to the front first. It takes a buffer when it has none and
// the budget has room, else it offers what small has left.
func (a *ahead) room() []byte {
	if a.buf == nil && (a.budget == nil || a.budget.try(aheadSize)) {
		a.buf = aheadPool.Get().(*[aheadSize]byte)
		if a.mem != nil {
			a.w = copy(a.buf[:], a.mem[a.r:a.w])
			a.r = 0
		}
		a.mem = a.buf[:]
	}
	if a.mem == nil {
		a.mem = a.small[:]
	}
	if a.r > 0 {
		a.w = copy(a.mem, a.mem[a.r:a.w])
		a.r = 0
	}
	return a.mem[a.w:]
}

// put buffers b, bytes of the stream read elsewhere (the handshake's
// first header, an idle wait's first bytes); more may follow on the
// socket.
func (a *ahead) put(b []byte) {
	if len(b) == 0 {
		return
	}
	a.w += copy(a.room(), b)
	a.drained = false
}

// add records n bytes read into room().
func (a *ahead) add(n, offered int) {
	a.w += n
	a.drained = n < offered
}

// take copies buffered bytes into dst and returns how many.
func (a *ahead) take(dst []byte) int {
	n := copy(dst, a.mem[a.r:a.w])
	a.r += n
	return n
}

// release gives the buffer back, and its bytes to the budget; nothing
// may be buffered.
func (a *ahead) release() {
	if a.r != a.w {
		return
	}
	if a.buf != nil {
		aheadPool.Put(a.buf)
		if a.budget != nil {
			a.budget.release(aheadSize)
		}
	}
	a.buf, a.mem, a.r, a.w = nil, nil, 0, 0
}

// recv reads exactly len(dst) bytes of the stream into dst: what is
// buffered first, then the rest from the socket, with what follows it read
// ahead (all the buffer's room when the rest is small, else only the next
// header). It holds no lock and waits at most io_timeout without progress.
//
// Once the link is closed (abortServersUsing closes it when a region it
// uses is unregistered) nothing buffered is served: the frames read ahead
// would otherwise still land after the close, which the dialer sees as the
// end of the connection and of the writes on it.
func (sc *serverConn) recv(dst []byte) error {
	if sc.link.closed.Load() {
		return net.ErrClosed
	}
	n := sc.in.take(dst)
	dst = dst[n:]
	if len(dst) == 0 {
		return nil
	}
	next := sc.in.room() // empty: take emptied it
	if len(dst) > aheadSmall {
		next = next[:RequestSize]
	}
	got, err := sc.link.readFullNext(dst, next)
	sc.in.add(got, len(next))
	return err
}

// fill reads what is already on the socket into the buffer, without
// waiting (nothing when the buffer is full).
func (sc *serverConn) fill() error {
	room := sc.in.room()
	if len(room) == 0 {
		return nil
	}
	n, err := sc.link.tryRead(room)
	sc.in.add(n, len(room))
	return err
}

// waitIdle waits, without a time limit and holding no buffer, for the
// first bytes of the next frame; nothing is buffered.
func (sc *serverConn) waitIdle() error {
	sc.in.release()
	n, err := sc.link.readIdle(sc.hdr[:])
	if n > 0 {
		sc.in.put(sc.hdr[:n])
	}
	return err
}
