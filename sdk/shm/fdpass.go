package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Limits of the fd channel.
const (
	// MaxFDs is the most fds one message may carry: one below the
	// kernel's own cap of 253 (SCM_MAX_FD), so that a message with more is
	// still sent, cut by the kernel (MSG_CTRUNC) and rejected. A batch
	// registration sends its memfds in messages of up to MaxFDs.
	MaxFDs = 252
	// MaxPending is how many messages an FDReceiver keeps that nobody has
	// taken yet; further messages are rejected and their fds closed.
	MaxPending = 1024
	// HeaderSize is the size of the in-band header of every message.
	HeaderSize = 16
)

// Header fields: every message is exactly HeaderSize bytes,
// {magic u32, version u16, nfds u16, id u64}, little-endian.
const (
	headerMagic   = 0x44465946 // "FYFD"
	headerVersion = 1
)

// Errors of the fd channel; test them with errors.Is.
var (
	// ErrClosed is returned after the local end was closed.
	ErrClosed = errors.New("shm: fd channel closed")
	// ErrPeerClosed means the other end closed the socket: for a plugin,
	// the host is gone.
	ErrPeerClosed = errors.New("shm: fd channel closed by peer")
	// ErrBadMessage describes a message that was rejected.
	ErrBadMessage = errors.New("shm: malformed fd message")
)

// Socketpair makes a connected SOCK_SEQPACKET unix socket pair, both ends
// close-on-exec. The host keeps host (for an FDSender); child goes to the
// plugin through exec.Cmd.ExtraFiles (which clears close-on-exec on the
// child's copy) and the host closes its copy of child once the plugin has
// started, so that the plugin sees EOF when the host goes away.
func Socketpair() (host *os.File, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("shm: socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "ferry-fd-host"), os.NewFile(uintptr(fds[1]), "ferry-fd-child"), nil
}

// newConn turns f into a *net.UnixConn (through the netpoller, so that
// Close interrupts a blocked read) and closes f: the conn holds a duplicate.
func newConn(f *os.File) (*net.UnixConn, error) {
	if f == nil {
		return nil, errors.New("shm: nil file")
	}
	defer f.Close()
	sotype, err := socketType(f)
	if err != nil {
		return nil, fmt.Errorf("shm: %s: %w", f.Name(), err)
	}
	if sotype != unix.SOCK_SEQPACKET {
		return nil, fmt.Errorf("shm: %s: socket type %d is not SOCK_SEQPACKET", f.Name(), sotype)
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("shm: %s: %w", f.Name(), err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("shm: %s is not a unix socket", f.Name())
	}
	return uc, nil
}

func socketType(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var sotype int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		sotype, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_TYPE)
	}); err != nil {
		return 0, err
	}
	return sotype, serr
}

// FDSender sends fds on the host end of the socketpair. It is safe for
// concurrent use.
type FDSender struct {
	mu     sync.Mutex
	conn   *net.UnixConn
	closed bool
}

// NewFDSender takes ownership of f, the host end of a [Socketpair] (f is
// closed, also on error).
func NewFDSender(f *os.File) (*FDSender, error) {
	c, err := newConn(f)
	if err != nil {
		return nil, err
	}
	return &FDSender{conn: c}, nil
}

// Send sends fds, filed under id, in one message. The receiver gets its
// own copies; Send does not close fds. At most [MaxFDs] fds per message.
func (s *FDSender) Send(id uint64, fds ...int) error {
	if len(fds) > MaxFDs {
		return fmt.Errorf("shm: send fd message %d: %d fds, at most %d", id, len(fds), MaxFDs)
	}
	for _, fd := range fds {
		if fd < 0 {
			return fmt.Errorf("shm: send fd message %d: invalid fd %d", id, fd)
		}
	}
	var hdr [HeaderSize]byte
	encodeHeader(&hdr, id, len(fds))
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("shm: send fd message %d: %w", id, ErrClosed)
	}
	n, oobn, err := s.conn.WriteMsgUnix(hdr[:], oob, nil)
	if err != nil {
		return fmt.Errorf("shm: send fd message %d: %w", id, err)
	}
	if n != len(hdr) || oobn != len(oob) {
		return fmt.Errorf("shm: send fd message %d: short write (%d/%d bytes, %d/%d control)", id, n, len(hdr), oobn, len(oob))
	}
	return nil
}

// Close closes the socket; the receiver sees EOF. Close is idempotent.
func (s *FDSender) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.conn.Close()
}

// FDReceiver reads fd messages on the plugin end of the socketpair. One
// goroutine, owned by the receiver, reads every message as it arrives and
// files it under its id until [FDReceiver.Take] claims it. It is safe for
// concurrent use.
type FDReceiver struct {
	conn       *net.UnixConn
	maxPending int
	done       chan struct{} // closed when the reader goroutine returns

	mu       sync.Mutex
	closed   bool
	err      error                 // why the reader stopped
	pending  map[uint64][]int      // arrived, not taken
	waiters  map[uint64]chan []int // Take calls waiting, buffered 1
	rejected uint64
	lastRej  error

	onWait func(id uint64) // test hook: a Take is about to block
}

// NewFDReceiver takes ownership of f, the plugin end of a [Socketpair]
// (f is closed, also on error), and starts reading it. Close stops the
// reader and waits for it.
func NewFDReceiver(f *os.File) (*FDReceiver, error) {
	return newFDReceiver(f, MaxPending)
}

func newFDReceiver(f *os.File, maxPending int) (*FDReceiver, error) {
	c, err := newConn(f)
	if err != nil {
		return nil, err
	}
	r := &FDReceiver{
		conn:       c,
		maxPending: maxPending,
		done:       make(chan struct{}),
		pending:    make(map[uint64][]int),
		waiters:    make(map[uint64]chan []int),
	}
	go r.read()
	return r, nil
}

// read is the receiver's goroutine.
func (r *FDReceiver) read() {
	defer close(r.done)
	var buf [2 * HeaderSize]byte // room to see an oversized message as such
	oob := make([]byte, unix.CmsgSpace(4*MaxFDs))
	for {
		n, oobn, flags, _, err := r.conn.ReadMsgUnix(buf[:], oob)
		// The kernel installed fds even when the read reports EOF or an
		// error along with them: collect them first so none leaks.
		fds, perr := parseRights(oob[:oobn])
		if err != nil {
			closeFDs(fds)
			r.stop(err)
			return
		}
		if perr != nil {
			closeFDs(fds)
			r.reject(perr)
			continue
		}
		switch {
		case flags&unix.MSG_CTRUNC != 0:
			closeFDs(fds)
			r.reject(fmt.Errorf("%w: more than %d fds (control data truncated)", ErrBadMessage, MaxFDs))
			continue
		case flags&unix.MSG_TRUNC != 0 || n != HeaderSize:
			closeFDs(fds)
			r.reject(fmt.Errorf("%w: %d bytes, want %d", ErrBadMessage, n, HeaderSize))
			continue
		}
		id, nfds, err := decodeHeader(buf[:n])
		if err != nil {
			closeFDs(fds)
			r.reject(err)
			continue
		}
		if nfds != len(fds) {
			closeFDs(fds)
			r.reject(fmt.Errorf("%w: message %d announces %d fds, carries %d", ErrBadMessage, id, nfds, len(fds)))
			continue
		}
		r.deliver(id, fds)
	}
}

// parseRights returns every fd in the control data, even if part of it
// is malformed (it is the kernel's, so it should not be).
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control data: %w", ErrBadMessage, err)
	}
	var fds []int
	var bad error
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			bad = fmt.Errorf("%w: unexpected control message level %d type %d", ErrBadMessage, msgs[i].Header.Level, msgs[i].Header.Type)
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			bad = fmt.Errorf("%w: SCM_RIGHTS: %w", ErrBadMessage, err)
			continue
		}
		fds = append(fds, got...)
	}
	return fds, bad
}

func (r *FDReceiver) deliver(id uint64, fds []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		closeFDs(fds)
		return
	}
	if w, ok := r.waiters[id]; ok {
		delete(r.waiters, id)
		w <- fds
		return
	}
	if _, dup := r.pending[id]; dup {
		closeFDs(fds)
		r.rejectLocked(fmt.Errorf("%w: id %d sent again before it was taken", ErrBadMessage, id))
		return
	}
	if len(r.pending) >= r.maxPending {
		closeFDs(fds)
		r.rejectLocked(fmt.Errorf("%w: id %d: %d messages not taken yet", ErrBadMessage, id, len(r.pending)))
		return
	}
	r.pending[id] = fds
}

func (r *FDReceiver) reject(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejectLocked(err)
}

func (r *FDReceiver) rejectLocked(err error) {
	r.rejected++
	r.lastRej = err
}

func (r *FDReceiver) stop(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		err = ErrClosed
	case errors.Is(err, io.EOF):
		err = ErrPeerClosed
	default:
		err = fmt.Errorf("shm: fd channel: %w", err)
	}
	r.err = err
}

// Take returns the fds of the message filed under id, waiting for it if it
// has not arrived yet. The caller owns the returned fds and must close
// them. Take fails when ctx ends first, or when the channel stopped (see
// [FDReceiver.Err]) without that message. At most one Take may wait for a
// given id.
func (r *FDReceiver) Take(ctx context.Context, id uint64) ([]int, error) {
	r.mu.Lock()
	if fds, ok := r.pending[id]; ok {
		delete(r.pending, id)
		r.mu.Unlock()
		return fds, nil
	}
	if r.closed {
		r.mu.Unlock()
		return nil, fmt.Errorf("shm: take fd message %d: %w", id, ErrClosed)
	}
	if r.err != nil {
		err := r.err
		r.mu.Unlock()
		return nil, fmt.Errorf("shm: take fd message %d: %w", id, err)
	}
	if _, busy := r.waiters[id]; busy {
		r.mu.Unlock()
		return nil, fmt.Errorf("shm: take fd message %d: another Take is waiting for it", id)
	}
	ch := make(chan []int, 1)
	r.waiters[id] = ch
	hook := r.onWait
	r.mu.Unlock()
	if hook != nil {
		hook(id)
	}

	var cause error
	select {
	case fds := <-ch:
		return fds, nil
	case <-ctx.Done():
		cause = ctx.Err()
	case <-r.done:
	}
	// Give up, unless the message slipped in meanwhile.
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.waiters[id] == ch {
		delete(r.waiters, id)
	}
	select {
	case fds := <-ch:
		if cause == nil {
			return fds, nil
		}
		// Nobody wants it now: keep it for a later Take.
		if r.closed {
			closeFDs(fds)
		} else {
			r.pending[id] = fds
		}
	default:
	}
	if cause == nil {
		cause = r.err
	}
	return nil, fmt.Errorf("shm: take fd message %d: %w", id, cause)
}

// Done is closed when the reader stopped: the other end closed the socket
// (the host is gone), reading failed, or Close was called.
func (r *FDReceiver) Done() <-chan struct{} { return r.done }

// Err returns why the reader stopped ([ErrPeerClosed], [ErrClosed] or a
// read error), or nil while it runs.
func (r *FDReceiver) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Rejected returns how many messages were rejected (malformed, too many
// fds, a repeated id, too many pending) and why the last one was. The fds
// of a rejected message are closed.
func (r *FDReceiver) Rejected() (count uint64, last error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rejected, r.lastRej
}

// Close stops the reader, waits for it, and closes the fds of messages
// nobody took. Waiting Take calls fail with [ErrClosed]. Close is
// idempotent.
func (r *FDReceiver) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		<-r.done
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	err := r.conn.Close()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, fds := range r.pending {
		closeFDs(fds)
		delete(r.pending, id)
	}
	if err != nil {
		return fmt.Errorf("shm: close fd receiver: %w", err)
	}
	return nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func encodeHeader(b *[HeaderSize]byte, id uint64, nfds int) {
	binary.LittleEndian.PutUint32(b[0:], headerMagic)
	binary.LittleEndian.PutUint16(b[4:], headerVersion)
	binary.LittleEndian.PutUint16(b[6:], uint16(nfds))
	binary.LittleEndian.PutUint64(b[8:], id)
}

// decodeHeader checks and decodes the in-band header of one message.
func decodeHeader(b []byte) (id uint64, nfds int, err error) {
	if len(b) != HeaderSize {
		return 0, 0, fmt.Errorf("%w: header of %d bytes, want %d", ErrBadMessage, len(b), HeaderSize)
	}
	if m := binary.LittleEndian.Uint32(b[0:]); m != headerMagic {
		return 0, 0, fmt.Errorf("%w: bad magic %#x", ErrBadMessage, m)
	}
	if v := binary.LittleEndian.Uint16(b[4:]); v != headerVersion {
		return 0, 0, fmt.Errorf("%w: header version %d, this side speaks %d", ErrBadMessage, v, headerVersion)
	}
	n := int(binary.LittleEndian.Uint16(b[6:]))
	if n > MaxFDs {
		return 0, 0, fmt.Errorf("%w: %d fds, at most %d", ErrBadMessage, n, MaxFDs)
	}
	return binary.LittleEndian.Uint64(b[8:]), n, nil
}
