package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/sdk/memcpy"
	"github.com/ferrydev/ferry/sdk/shm"
)

// baseline is the raw way of doing the bench's work without Ferry,
// measured in the same run, on memory of the same kind as Ferry's (sealed
// memfds mapped MAP_SHARED) and in the same shape (threads streams, each
// moving batch requests of size bytes per round trip).
type baseline interface {
	name() string
	// fill writes round's pattern into every source buffer and another
	// one into every destination buffer, off the clock.
	fill(round int) error
	work(th int) (uint64, error)
	// verify checks that every destination holds its source's bytes.
	verify(round int) error
	close()
}

// startBaseline returns the baseline for o's transport, or nil when there
// is none.
func startBaseline(o benchOpts) (baseline, error) {
	switch o.transport {
	case "tcp":
		return startTCPBaseline(o)
	case "shm":
		return newMemcpyBaseline(o)
	}
	return nil, nil
}

// bufSeed makes the pattern of thread th's buffers differ from the other
// threads' as well as from the other rounds'.
func bufSeed(seed uint64, th int) uint64 { return seed ^ uint64(th)<<48 }

// memcpyBaseline is what a same-machine transport is compared with: per
// stream, one thread copying each request's bytes from one written memfd
// mapping to another with shm's copy routine (sdk/memcpy), as a caller
// that shared memory by hand would. The
// direction of --op does not matter to a copy: src is always the source.
type memcpyBaseline struct {
	o        benchOpts
	regions  []*shm.Region
	src, dst [][]byte
}

func newMemcpyBaseline(o benchOpts) (*memcpyBaseline, error) {
	m := &memcpyBaseline{o: o}
	n := int(o.size) * o.batch
	for th := range o.threads {
		for _, side := range []*[][]byte{&m.src, &m.dst} {
			r, err := shm.Create(fmt.Sprintf("ferry-bench-memcpy-%d", th), n)
			if err != nil {
				m.close()
				return nil, fmt.Errorf("memcpy baseline: %w", err)
			}
			m.regions = append(m.regions, r)
			*side = append(*side, r.Mem())
		}
	}
	return m, nil
}

func (m *memcpyBaseline) name() string { return "memcpy-1thread" }

func (m *memcpyBaseline) fill(round int) error {
	src, dst := roundSeeds(m.o, round)
	for th := range m.o.threads {
		fillPattern(m.src[th], bufSeed(src, th))
		fillPattern(m.dst[th], bufSeed(dst, th))
	}
	return nil
}

func (m *memcpyBaseline) work(th int) (uint64, error) {
	src, dst, size := m.src[th], m.dst[th], m.o.size
	var n int
	for k := range int64(m.o.batch) {
		// The routine shm copies with, so that the baseline does
		// Ferry's copy and the ratio measures only what Ferry adds.
		n += memcpy.Copy(dst[k*size:(k+1)*size], src[k*size:(k+1)*size])
	}
	return uint64(n), nil
}

func (m *memcpyBaseline) verify(round int) error {
	for th := range m.o.threads {
		if !bytes.Equal(m.src[th], m.dst[th]) {
			return fmt.Errorf("verify the memcpy baseline: after round %d, stream %d's destination (%d bytes) differs from its source: the baseline did not copy; this is a bench bug",
				round+1, th, len(m.src[th]))
		}
	}
	return nil
}

func (m *memcpyBaseline) close() {
	for _, r := range m.regions {
		r.Close()
	}
}

// The raw TCP baseline: the same work over plain Go TCP sockets between
// two processes, one stream per thread, each end's buffer a memfd mapping
// of size*batch bytes laid out like Ferry's (request k at k*size). Every
// message starts with a 24-byte header: op, then two words.
const (
	peerWrite = 1 // offset, length; the payload follows; answered by an 8-byte ack
	peerRead  = 2 // offset, length; answered by the payload
	peerFill  = 3 // seed, 0; the peer fills its buffer; answered by an 8-byte ack
	peerSum   = 4 // 0, 0; answered by the sha256 of the peer's buffer
)

const peerHeader = 24

type baselinePeer struct {
	cmd     *exec.Cmd
	o       benchOpts
	conns   []net.Conn
	regions []*shm.Region
	bufs    [][]byte
	// tmpl is each stream's request vector, built once; vec is the copy
	// that a round trip consumes (WriteTo advances its elements).
	tmpl, vec [][][]byte
}

func startTCPBaseline(o benchOpts) (*baselinePeer, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, "bench-peer", "--size", fmt.Sprint(o.size*int64(o.batch)))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the tcp baseline's peer: %w", err)
	}
	var line [128]byte
	n, err := out.Read(line[:])
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("tcp baseline peer exited before it said its address (see its log above): %w", err)
	}
	p, err := dialTCPBaseline(o, strings.TrimSpace(string(line[:n])))
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, err
	}
	p.cmd = cmd
	return p, nil
}

// dialTCPBaseline opens one stream per thread to the peer at addr.
func dialTCPBaseline(o benchOpts, addr string) (*baselinePeer, error) {
	p := &baselinePeer{o: o}
	op := uint64(peerWrite)
	if o.op == host.Read {
		op = peerRead
	}
	for th := range o.threads {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("tcp baseline peer %s: %w", addr, err)
		}
		p.conns = append(p.conns, c)
		r, err := shm.Create(fmt.Sprintf("ferry-bench-tcp-%d", th), int(o.size)*o.batch)
		if err != nil {
			p.close()
			return nil, fmt.Errorf("tcp baseline: %w", err)
		}
		p.regions = append(p.regions, r)
		buf := r.Mem()
		p.bufs = append(p.bufs, buf)
		hdr := make([]byte, peerHeader*o.batch)
		var tmpl [][]byte
		for k := range int64(o.batch) {
			h := hdr[peerHeader*k : peerHeader*(k+1)]
			binary.LittleEndian.PutUint64(h, op)
			binary.LittleEndian.PutUint64(h[8:], uint64(k*o.size))
			binary.LittleEndian.PutUint64(h[16:], uint64(o.size))
			tmpl = append(tmpl, h)
			if op == peerWrite {
				tmpl = append(tmpl, buf[k*o.size:(k+1)*o.size])
			}
		}
		p.tmpl = append(p.tmpl, tmpl)
		p.vec = append(p.vec, make([][]byte, 0, len(tmpl)))
	}
	return p, nil
}

func (p *baselinePeer) name() string { return "raw-go-tcp" }

func (p *baselinePeer) work(th int) (uint64, error) {
	c := p.conns[th]
	p.vec[th] = append(p.vec[th][:0], p.tmpl[th]...)
	v := net.Buffers(p.vec[th])
	if _, err := v.WriteTo(c); err != nil {
		return 0, err
	}
	if p.o.op == host.Write {
		var ack [8]byte
		for range p.o.batch {
			if _, err := io.ReadFull(c, ack[:]); err != nil {
				return 0, err
			}
		}
	} else if _, err := io.ReadFull(c, p.bufs[th]); err != nil {
		return 0, err
	}
	return uint64(p.o.size) * uint64(p.o.batch), nil
}

// ask sends stream th one control message and reads an answer of n bytes.
func (p *baselinePeer) ask(th int, op, a uint64, n int) ([]byte, error) {
	var h [peerHeader]byte
	binary.LittleEndian.PutUint64(h[:], op)
	binary.LittleEndian.PutUint64(h[8:], a)
	if _, err := p.conns[th].Write(h[:]); err != nil {
		return nil, err
	}
	ans := make([]byte, n)
	_, err := io.ReadFull(p.conns[th], ans)
	return ans, err
}

func (p *baselinePeer) fill(round int) error {
	src, dst := roundSeeds(p.o, round)
	local, remote := src, dst
	if p.o.op == host.Read {
		local, remote = dst, src
	}
	for th := range p.o.threads {
		fillPattern(p.bufs[th], bufSeed(local, th))
		if _, err := p.ask(th, peerFill, bufSeed(remote, th), 8); err != nil {
			return fmt.Errorf("tcp baseline: fill the peer's buffer of stream %d: %w", th, err)
		}
	}
	return nil
}

func (p *baselinePeer) verify(round int) error {
	for th := range p.o.threads {
		ans, err := p.ask(th, peerSum, 0, sha256.Size)
		if err != nil {
			return fmt.Errorf("verify the tcp baseline: checksum the peer's buffer of stream %d: %w", th, err)
		}
		if local := sha256.Sum256(p.bufs[th]); !bytes.Equal(local[:], ans) {
			return fmt.Errorf("verify the tcp baseline: after round %d, stream %d's buffers differ (here sha256 %x, at the peer %x, %d bytes): the raw protocol lost bytes; this is a bench bug",
				round+1, th, local[:8], ans[:8], len(p.bufs[th]))
		}
	}
	return nil
}

func (p *baselinePeer) close() {
	for _, c := range p.conns {
		c.Close()
	}
	if p.cmd != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
	for _, r := range p.regions {
		r.Close()
	}
}

// cmdBenchPeer is the baseline's far end: it serves the raw protocol
// above until killed.
func cmdBenchPeer(args []string) error {
	fs := flag.NewFlagSet("bench-peer", flag.ExitOnError)
	size := fs.Int64("size", 1<<20, "bytes of buffer per stream (size*batch of the bench)")
	fs.Parse(args)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr().String())
	return servePeer(ln, int(*size))
}

// servePeer serves each connection accepted on ln with a buffer of size
// bytes of its own until ln is closed; each connection's goroutine ends
// when its peer closes it or breaks the protocol.
func servePeer(ln net.Listener, size int) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			if err := servePeerConn(c, size); err != nil && !errors.Is(err, io.EOF) {
				fmt.Fprintf(os.Stderr, "ferry bench-peer: stream from %s: %v\n", c.RemoteAddr(), err)
			}
		}()
	}
}

func servePeerConn(c net.Conn, size int) error {
	r, err := shm.Create("ferry-bench-peer", size)
	if err != nil {
		return err
	}
	defer r.Close()
	buf := r.Mem()
	var h [peerHeader]byte
	ack := make([]byte, 8)
	for {
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return err
		}
		op, a, n := binary.LittleEndian.Uint64(h[:]), binary.LittleEndian.Uint64(h[8:]), binary.LittleEndian.Uint64(h[16:])
		switch op {
		case peerWrite, peerRead:
			if a > uint64(size) || n > uint64(size)-a {
				return fmt.Errorf("request of %d bytes at offset %d is outside the %d-byte buffer", n, a, size)
			}
			if op == peerWrite {
				if _, err = io.ReadFull(c, buf[a:a+n]); err == nil {
					_, err = c.Write(ack)
				}
			} else {
				_, err = c.Write(buf[a : a+n])
			}
		case peerFill:
			fillPattern(buf, a)
			_, err = c.Write(ack)
		case peerSum:
			sum := sha256.Sum256(buf)
			_, err = c.Write(sum[:])
		default:
			return fmt.Errorf("unknown op %d", op)
		}
		if err != nil {
			return err
		}
	}
}
