package samehost

import (
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Conn is one exchange connection, either side. Writes are serialised by
// its lock; one goroutine reads (Reader).
type Conn struct {
	C     *net.UnixConn
	codec Codec
	wmu   sync.Mutex
	buf   []byte // under wmu
}

// NewConn wraps c, whose messages codec writes.
func NewConn(c *net.UnixConn, codec Codec) *Conn { return &Conn{C: c, codec: codec} }

// Send writes m, with fd as SCM_RIGHTS when fd >= 0.
func (c *Conn) Send(m Msg, fd int) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.SendLocked(m, fd)
}

// Lock takes the write lock, so that what the caller looks up and then
// sends with SendLocked goes out before anything sent after it.
func (c *Conn) Lock() { c.wmu.Lock() }

// Unlock releases the write lock.
func (c *Conn) Unlock() { c.wmu.Unlock() }

// SendLocked is Send with the write lock held (Lock).
func (c *Conn) SendLocked(m Msg, fd int) error {
	c.buf = c.codec.Append(c.buf[:0], &m)
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	n, oobn, err := c.C.WriteMsgUnix(c.buf, oob, nil)
	if err != nil {
		return err
	}
	if n != len(c.buf) || oobn != len(oob) {
		return fmt.Errorf("short write: %d/%d bytes, %d/%d control", n, len(c.buf), oobn, len(oob))
	}
	return nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.C.Close() }

// Reader reads whole messages and the fds that came with them.
type Reader struct {
	codec Codec
	buf   []byte // one spare byte shows an oversized message as such
	oob   []byte
}

// NewReader returns a reader of codec's messages.
func NewReader(codec Codec) *Reader {
	return &Reader{codec: codec, buf: make([]byte, codec.MaxLen()+1), oob: make([]byte, unix.CmsgSpace(4*4))}
}

// Read returns the next message on c. Any fds it carried are returned to
// the caller, who owns them, also with an error (the kernel installed
// them whatever the message said).
func (r *Reader) Read(c *net.UnixConn) (Msg, []int, error) {
	n, oobn, flags, _, err := c.ReadMsgUnix(r.buf, r.oob)
	fds, perr := parseRights(r.oob[:oobn])
	if err != nil {
		return Msg{}, fds, err
	}
	if n == 0 {
		return Msg{}, fds, fmt.Errorf("%w: empty message (peer closed?)", ErrMalformed)
	}
	if perr != nil {
		return Msg{}, fds, perr
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return Msg{}, fds, fmt.Errorf("%w: truncated (flags %#x)", ErrMalformed, flags)
	}
	m, err := r.codec.Decode(r.buf[:n])
	return m, fds, err
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control data: %w", ErrMalformed, err)
	}
	var fds []int
	var bad error
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			bad = fmt.Errorf("%w: control message level %d type %d", ErrMalformed, msgs[i].Header.Level, msgs[i].Header.Type)
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			bad = fmt.Errorf("%w: SCM_RIGHTS: %w", ErrMalformed, err)
			continue
		}
		fds = append(fds, got...)
	}
	return fds, bad
}

// CloseFDs closes fds.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// PeerUID returns the uid of the process at the other end of c, as the
// kernel recorded it at connect (dialer) or listen (server) time.
func PeerUID(c *net.UnixConn) (uint32, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("SO_PEERCRED: %w", cerr)
	}
	return cred.Uid, nil
}

// UIDAllowed says whether a process running as uid may exchange regions
// with this one: the same user, or root (which could read our memory
// anyway).
func UIDAllowed(uid uint32) bool { return uid == uint32(os.Getuid()) || uid == 0 }
