package samehost

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/ring"
)

// DefaultMaxConns is how many peer connections a Server serves at once
// unless told otherwise.
const DefaultMaxConns = 1024

// Server accepts peer plugins on a listener, checks each (SO_PEERCRED,
// hello, incarnation, cluster secret) and then hands its region queries
// to Answer and collects its revoke acknowledgements. It owns the accept
// loop and one goroutine per connection; Close stops and waits for them.
//
// Mu is the plugin's own lock: the one under which Answer looks a region
// up and calls Hold, and under which the plugin unregisters a region and
// calls Holders, so that a region is either found by an answer, which
// records that the peer holds it, or revoked from every peer that does.
type Server struct {
	Link          *Link
	Mu            *sync.Mutex
	Engine        string
	Incarnation   uint64
	MaxConns      int           // connections served at once, at most; 0: DefaultMaxConns
	RevokeTimeout time.Duration // how long Revoke waits for a peer to drop a region
	// Answer replies to a query for region; an error ends the connection.
	Answer func(sc *ServerConn, region uint32) error
	// Fatal, when set, is called once the accept loop ends for good (the
	// listener was closed under the plugin, not by Close).
	Fatal func(error)
	// Served, when set, counts what dialers report they moved in this
	// engine's memory (MsgServed), on rail 0; nil: such a message ends
	// the connection, as it does on a server that predates it.
	Served *kit.Served

	ln       *net.UnixListener
	conns    map[*ServerConn]struct{} // under Mu
	closed   bool                     // under Mu
	stopping chan struct{}
	wg       sync.WaitGroup
	dead     atomic.Pointer[error]
	authLog  lockedRateLog
}

// ServerConn is a connection a peer plugin dialed to us.
type ServerConn struct {
	*Conn
	// held is what this peer may hold: region id -> generation. acks are
	// the revokes sent and not yet acknowledged, by generation. Both under
	// Server.Mu.
	held map[uint32]uint64
	acks map[uint64]chan struct{}
	gone chan struct{} // closed when serve returns
}

// Hold records that sc's peer was handed region at generation gen, so
// that its unregistering revokes it there. Caller holds Server.Mu.
func (sc *ServerConn) Hold(region uint32, gen uint64) { sc.held[region] = gen }

// Serve starts accepting on ln. Caller holds Mu (it sets up what Accepting
// and Close read).
func (s *Server) Serve(ln *net.UnixListener) {
	s.ln = ln
	s.conns = map[*ServerConn]struct{}{}
	s.stopping = make(chan struct{})
	if s.MaxConns <= 0 {
		s.MaxConns = DefaultMaxConns
	}
	s.wg.Add(1)
	go s.acceptLoop()
}

// Accepting says whether new peers can connect: Serve was called and
// neither Close nor the listener's end stopped the loop.
func (s *Server) Accepting() bool {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.ln != nil && !s.closed && s.dead.Load() == nil
}

func (s *Server) isClosed() bool {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return s.closed
}

// Close closes the listener and every connection and waits for their
// goroutines. Close before Serve does nothing.
func (s *Server) Close() {
	s.Mu.Lock()
	if s.ln == nil {
		s.Mu.Unlock()
		return
	}
	if s.closed {
		s.Mu.Unlock()
		s.wg.Wait()
		return
	}
	s.closed = true
	close(s.stopping)
	for sc := range s.conns {
		sc.C.Close()
	}
	s.Mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

// CloseListener closes the listener alone, as a failure would: the
// accept loop ends and Fatal is called.
func (s *Server) CloseListener() { s.ln.Close() }

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	l := s.Link
	var backoff time.Duration
	var errLog, fullLog rateLog
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			if s.isClosed() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				// Closed under us, not by Close: no peer can connect any
				// more. Say so (Accepting, and the fatal hook ends the
				// process so that the host restarts the plugin).
				s.acceptDead(err)
				return
			}
			// Out of descriptors (EMFILE, ENFILE) or memory: a passing
			// condition. Wait a little, more each time, instead of
			// spinning on Accept or giving up on every future peer.
			l.Stats.AcceptErrors.Add(1)
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if n, ok := errLog.allow(time.Now()); ok {
				l.Log.Warn("accept failed; retrying", "socket", s.ln.Addr().String(), "error", err, "retry_in", backoff, "failures_since_last_log", n)
			}
			tm := time.NewTimer(backoff)
			select {
			case <-tm.C:
			case <-s.stopping:
				tm.Stop()
				return
			}
			continue
		}
		backoff = 0
		s.Mu.Lock()
		if s.closed {
			s.Mu.Unlock()
			c.Close()
			return
		}
		if len(s.conns) >= s.MaxConns {
			s.Mu.Unlock()
			// Counted before the close, so that whoever sees the close
			// sees the count too.
			l.Stats.ConnsRefused.Add(1)
			c.Close()
			if n, ok := fullLog.allow(time.Now()); ok {
				l.Log.Warn("refused a peer plugin's connection: max_conns connections are open; raise max_conns in the "+l.Name+" plugin's config block",
					"max_conns", s.MaxConns, "refused_since_last_log", n)
			}
			continue
		}
		sc := &ServerConn{Conn: NewConn(c, l.Codec), held: map[uint32]uint64{}, acks: map[uint64]chan struct{}{}, gone: make(chan struct{})}
		s.conns[sc] = struct{}{}
		s.wg.Add(1)
		s.Mu.Unlock()
		l.Stats.ConnsAccepted.Add(1)
		l.Stats.ConnsOpen.Add(1)
		go s.serve(sc)
	}
}

// acceptDead records that the accept loop ended for good with err.
func (s *Server) acceptDead(err error) {
	s.dead.Store(&err)
	s.Link.Log.Error("the accept loop ended: no new peer can connect to this plugin", "error", err)
	if s.Fatal != nil {
		s.Fatal(fmt.Errorf("%s: accept loop ended: %w", s.Link.Name, err))
	}
}

// serve checks who dialed and what they want, then answers region
// queries and collects revoke acknowledgements until the connection ends.
func (s *Server) serve(sc *ServerConn) {
	defer s.wg.Done()
	l := s.Link
	defer func() {
		sc.C.Close()
		s.Mu.Lock()
		delete(s.conns, sc)
		s.Mu.Unlock()
		// A dialer drops everything it got on a connection when that
		// connection ends, so its end counts as an acknowledgement.
		close(sc.gone)
		l.Stats.ConnsOpen.Add(-1)
	}()
	rd := NewReader(l.Codec)
	if !s.hello(sc, rd) {
		return
	}
	for {
		m, fds, err := rd.Read(sc.C)
		if len(fds) > 0 {
			CloseFDs(fds)
			if err == nil {
				err = ErrMalformed
			}
		}
		if err != nil {
			if IsProtocol(err) {
				l.Stats.Malformed.Add(1)
				l.Log.Warn("dropping a peer connection: malformed message", "error", err)
			}
			return
		}
		switch m.Type {
		case MsgQuery:
			if err := s.Answer(sc, m.Region); err != nil {
				return
			}
		case MsgServed:
			if s.Served == nil {
				l.Stats.Malformed.Add(1)
				return
			}
			c := s.Served.Cell(m.Name, 0)
			c.Add(ring.OpWrite, m.Tally.Writes, m.Tally.WriteBytes)
			c.Add(ring.OpRead, m.Tally.Reads, m.Tally.ReadBytes)
		case MsgRevokeAck:
			s.Mu.Lock()
			if ch, ok := sc.acks[m.Gen]; ok {
				delete(sc.acks, m.Gen)
				close(ch)
			}
			s.Mu.Unlock()
		default:
			l.Stats.Malformed.Add(1)
			return
		}
	}
}

// hello runs the server's side of the handshake; false: the connection
// is refused (and answered why, where the dialer may hear it).
func (s *Server) hello(sc *ServerConn, rd *Reader) bool {
	l := s.Link
	// Read the hello first, whatever we answer: closing a unix socket with
	// unread data makes the other end's read fail with ECONNRESET instead
	// of returning our answer.
	sc.C.SetReadDeadline(time.Now().Add(HelloTimeout))
	h, fds, herr := rd.Read(sc.C)
	CloseFDs(fds)
	if herr == nil && (h.Type != MsgHello || len(fds) != 0) {
		herr = ErrMalformed
	}
	sc.C.SetWriteDeadline(time.Now().Add(HelloTimeout))
	uid, err := PeerUID(sc.C)
	if err != nil || !UIDAllowed(uid) {
		l.Stats.CredRejected.Add(1)
		l.Stats.HelloRejected.Add(1)
		l.Log.Warn("refused a peer plugin: SO_PEERCRED says another user", "uid", uid, "error", err)
		_ = sc.Send(Msg{Type: MsgHelloAck, Status: ring.StatusPermission}, -1)
		return false
	}
	if herr != nil {
		l.Stats.HelloRejected.Add(1)
		if !IsProtocol(herr) {
			return false // timeout or the dialer went away
		}
		l.Stats.Malformed.Add(1)
		_ = sc.Send(Msg{Type: MsgHelloAck, Status: ring.StatusProtocol}, -1)
		return false
	}
	if h.Name != s.Engine || h.Inc != s.Incarnation {
		// The dialer wants another life of this segment (or another
		// segment that used to listen here).
		l.Stats.HelloRejected.Add(1)
		_ = sc.Send(Msg{Type: MsgHelloAck, Status: ring.StatusStaleIncarnation, Inc: s.Incarnation}, -1)
		return false
	}
	secret := l.Secret
	if secret != nil && !h.Auth {
		l.Stats.HelloRejected.Add(1)
		l.Stats.AuthFailed.Add(1)
		if n, ok := s.authLog.allow(time.Now()); ok {
			l.Log.Warn("refused a peer plugin: it sent no proof of the cluster secret and this engine has one; set the same cluster_secret in the "+l.Name+" plugin's config block of both engines", "refused_since_last_log", n)
		}
		_ = sc.Send(Msg{Type: MsgHelloAck, Status: ring.StatusPermission}, -1)
		return false
	}
	ack := Msg{Type: MsgHelloAck, Status: ring.StatusOK, Inc: s.Incarnation}
	if secret != nil {
		ack.Auth, ack.Nonce = true, NewNonce()
		ack.MAC = Proof(secret, l.Label, "server", h.Name, h.Inc, &h.Nonce, &ack.Nonce)
	}
	// A dialer with a secret, when this engine has none, gets an answer
	// without a proof and hangs up.
	if err := sc.Send(ack, -1); err != nil {
		return false
	}
	if secret != nil {
		a, fds, err := rd.Read(sc.C)
		CloseFDs(fds)
		if err != nil || a.Type != MsgAuth || len(fds) != 0 || !Verify(a.MAC, secret, l.Label, "dialer", h.Name, h.Inc, &ack.Nonce, &h.Nonce) {
			l.Stats.HelloRejected.Add(1)
			l.Stats.AuthFailed.Add(1)
			if n, ok := s.authLog.allow(time.Now()); ok {
				l.Log.Warn("refused a peer plugin: its proof of the cluster secret does not verify; give both engines the same cluster_secret in the "+l.Name+" plugin's config block", "error", err, "refused_since_last_log", n)
			}
			return false
		}
	}
	sc.C.SetReadDeadline(time.Time{})
	sc.C.SetWriteDeadline(time.Time{})
	return true
}

// Revocation is the peers a region was revoked from, to tell (Revoke).
type Revocation struct {
	region  uint32
	gen     uint64
	holders []*ServerConn
	acks    []chan struct{}
}

// Holders takes region (generation gen) from every peer that holds it
// and returns them for Revoke. Caller holds Mu, with the region already
// out of its table.
func (s *Server) Holders(region uint32, gen uint64) Revocation {
	rv := Revocation{region: region, gen: gen}
	for sc := range s.conns {
		if g, ok := sc.held[region]; ok && g == gen {
			delete(sc.held, region)
			ch := make(chan struct{})
			sc.acks[gen] = ch
			rv.holders = append(rv.holders, sc)
			rv.acks = append(rv.acks, ch)
		}
	}
	return rv
}

// Revoke tells every peer in rv that the region is gone and waits until
// each has dropped it (acknowledged, or its connection ended), at most
// RevokeTimeout; a peer that does not answer in time loses its
// connection, which makes it drop the region as soon as its copies in
// flight end. Caller does not hold Mu.
func (s *Server) Revoke(rv Revocation) {
	l := s.Link
	for _, sc := range rv.holders {
		if sc.Send(Msg{Type: MsgRevoke, Region: rv.region, Gen: rv.gen}, -1) == nil {
			l.Stats.RevokesSent.Add(1)
		} else {
			sc.C.Close()
		}
	}
	limit := time.NewTimer(s.RevokeTimeout)
	defer limit.Stop()
	expired := false
	for i, sc := range rv.holders {
		if !expired {
			select {
			case <-rv.acks[i]:
				continue
			case <-sc.gone:
				continue
			case <-limit.C:
				expired = true
			}
		}
		select {
		case <-rv.acks[i]:
			continue
		case <-sc.gone:
			continue
		default:
		}
		l.Stats.RevokeTimeouts.Add(1)
		l.Log.Warn("peer did not drop a revoked region in time: closing its connection", "region", rv.region, "timeout", s.RevokeTimeout)
		s.Mu.Lock()
		delete(sc.acks, rv.gen)
		s.Mu.Unlock()
		sc.C.Close()
	}
}
