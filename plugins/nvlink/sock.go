package nvlink

import (
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// conn is one region-exchange connection, either side. Writes are
// serialised by wmu; one goroutine reads.
type conn struct {
	c   *net.UnixConn
	wmu sync.Mutex
	buf []byte // under wmu
}

// send writes m, with fd as SCM_RIGHTS when fd >= 0.
func (c *conn) send(m msg, fd int) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.sendLocked(m, fd)
}

func (c *conn) sendLocked(m msg, fd int) error {
	c.buf = m.encode(c.buf[:0])
	var oob []byte
	if fd >= 0 {
		oob = unix.UnixRights(fd)
	}
	n, oobn, err := c.c.WriteMsgUnix(c.buf, oob, nil)
	if err != nil {
		return err
	}
	if n != len(c.buf) || oobn != len(oob) {
		return fmt.Errorf("short write: %d/%d bytes, %d/%d control", n, len(c.buf), oobn, len(oob))
	}
	return nil
}

// reader reads whole messages and the fds that came with them.
type reader struct {
	buf [maxMsgLen + 1]byte // one spare byte shows an oversized message as such
	oob []byte
}

func newReader() *reader { return &reader{oob: make([]byte, unix.CmsgSpace(4*4))} }

// read returns the next message. Any fds it carried are returned to the
// caller, who owns them, also with an error (the kernel installed them
// whatever the message said).
func (r *reader) read(c *net.UnixConn) (msg, []int, error) {
	n, oobn, flags, _, err := c.ReadMsgUnix(r.buf[:], r.oob)
	fds, perr := parseRights(r.oob[:oobn])
	if err != nil {
		return msg{}, fds, err
	}
	if n == 0 {
		return msg{}, fds, fmt.Errorf("%w: empty message (peer closed?)", errMalformed)
	}
	if perr != nil {
		return msg{}, fds, perr
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return msg{}, fds, fmt.Errorf("%w: truncated (flags %#x)", errMalformed, flags)
	}
	m, err := decode(r.buf[:n])
	return m, fds, err
}

func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: control data: %w", errMalformed, err)
	}
	var fds []int
	var bad error
	for i := range msgs {
		if msgs[i].Header.Level != unix.SOL_SOCKET || msgs[i].Header.Type != unix.SCM_RIGHTS {
			bad = fmt.Errorf("%w: control message level %d type %d", errMalformed, msgs[i].Header.Level, msgs[i].Header.Type)
			continue
		}
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			bad = fmt.Errorf("%w: SCM_RIGHTS: %w", errMalformed, err)
			continue
		}
		fds = append(fds, got...)
	}
	return fds, bad
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// peerUID returns the uid of the process at the other end of c, as the
// kernel recorded it at connect (dialer) or listen (server) time.
func peerUID(c *net.UnixConn) (uint32, error) {
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

// uidAllowed says whether a process running as uid may exchange regions
// with this one: the same user, or root (which could read our memory
// anyway).
func uidAllowed(uid uint32) bool { return uid == uint32(os.Getuid()) || uid == 0 }
