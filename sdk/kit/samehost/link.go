package samehost

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// HelloTimeout bounds the connection setup on either side: connect,
// credentials, hello, its answer and the proofs.
const HelloTimeout = 5 * time.Second

// Link is one plugin's side of the exchange: what differs between
// plugins (name, proof label, wire format) and what both sides of every
// connection share (secret, log, counters). Set its fields before the
// first Dial or Serve; they are read without a lock.
type Link struct {
	Name   string // the plugin's name ("shm"): in socket names, logs and errors
	Label  string // the proofs' domain ("ferry-shm/1"), one per protocol
	Codec  Codec
	Secret []byte // the cluster secret; nil: none (same-user peers are trusted)
	Log    hclog.Logger
	Stats  *Counters
}

// EndpointVersion is the version of the endpoint blob Link writes.
const EndpointVersion = 1

// Endpoint is what peers need to reach a plugin, published in the
// segment descriptor as JSON.
type Endpoint struct {
	V       int    `json:"v"`
	Socket  string `json:"socket"`  // abstract unix socket, "@..."
	Machine string `json:"machine"` // the machine id the engine runs on
	// Served says the server counts what dialers report of their traffic
	// (MsgServed); a dialer reports only to a server that says so.
	Served bool `json:"served,omitempty"`
}

// Encode returns e's JSON.
func (e Endpoint) Encode() sdk.Endpoint {
	b, err := json.Marshal(e)
	if err != nil {
		panic(err) // strings and an int cannot fail to marshal
	}
	return b
}

// DecodeEndpoint parses a peer's endpoint blob, refusing one that is not
// this version's or whose socket is not an abstract socket name.
func (l *Link) DecodeEndpoint(b sdk.Endpoint) (Endpoint, error) {
	var e Endpoint
	if err := json.Unmarshal(b, &e); err != nil {
		return e, fmt.Errorf("endpoint is not %s's: %w", l.Name, err)
	}
	if e.V != EndpointVersion {
		return e, fmt.Errorf("endpoint version %d, this plugin reads %d", e.V, EndpointVersion)
	}
	if !strings.HasPrefix(e.Socket, "@") || len(e.Socket) < 2 || len(e.Socket) > 107 {
		return e, fmt.Errorf("endpoint socket %q is not an abstract unix socket name", e.Socket)
	}
	return e, nil
}

// Listen listens on a SOCK_SEQPACKET unix socket in the abstract
// namespace named "@ferry-<name>/<sha256(engine)[:8]>/<incarnation>/<random>":
// nothing on disk, gone with the process.
func (l *Link) Listen(engine string, inc uint64) (*net.UnixListener, string, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	sum := sha256.Sum256([]byte(engine))
	name := fmt.Sprintf("@ferry-%s/%x/%x/%s", l.Name, sum[:8], inc, hex.EncodeToString(rnd[:]))
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		return nil, "", fmt.Errorf("%s: listen on abstract socket %s: %w", l.Name, name, err)
	}
	return ln, name, nil
}

// IsProtocol says whether err is a peer speaking badly (malformed, or
// another version), not a connection that ended.
func IsProtocol(err error) bool { return errors.Is(err, ErrMalformed) || errors.Is(err, ErrVersion) }

// Dial connects to a peer plugin's socket and says hello: it checks that
// the plugin there runs as our user (or root), that it serves segment at
// incarnation inc, and with a secret that it proves it knows it, and
// proves it ourselves. It returns nil and the status for the descriptors
// waiting otherwise. ctx ends the dial (a peer closed meanwhile).
func (l *Link) Dial(ctx context.Context, socket, segment string, inc uint64) (*Conn, ring.Status) {
	ctx, cancel := context.WithTimeout(ctx, HelloTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unixpacket", socket)
	if err != nil {
		l.Stats.DialFailures.Add(1)
		l.Log.Debug("dial failed", "peer", segment, "socket", socket, "error", err)
		return nil, ring.StatusPeerUnreachable
	}
	c := nc.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	fail := func(st ring.Status) (*Conn, ring.Status) {
		c.Close()
		return nil, st
	}
	uid, err := PeerUID(c)
	if err != nil || !UIDAllowed(uid) {
		l.Stats.CredRejected.Add(1)
		l.Log.Warn("refused peer plugin: it runs as another user", "peer", segment, "uid", uid, "error", err)
		return fail(ring.StatusPermission)
	}
	cn := NewConn(c, l.Codec)
	// A server that refuses us (another user) answers before our hello
	// and closes: the write may fail, but its answer is still there to
	// read, and says why.
	secret := l.Secret
	hello := Msg{Type: MsgHello, Name: segment, Inc: inc}
	if secret != nil {
		hello.Auth, hello.Nonce = true, NewNonce()
	}
	sendErr := cn.Send(hello, -1)
	ack, fds, err := NewReader(l.Codec).Read(c)
	if err != nil && sendErr != nil {
		err = sendErr
	}
	CloseFDs(fds)
	switch {
	case err != nil && IsProtocol(err):
		l.Stats.Malformed.Add(1)
		return fail(ring.StatusProtocol)
	case err != nil:
		l.Stats.DialFailures.Add(1)
		return fail(ring.StatusPeerUnreachable)
	case ack.Type != MsgHelloAck || len(fds) != 0:
		l.Stats.Malformed.Add(1)
		return fail(ring.StatusProtocol)
	case ack.Status != ring.StatusOK:
		l.Stats.HelloRejected.Add(1)
		if ack.Status == ring.StatusPermission {
			l.Stats.CredRejected.Add(1)
			if secret == nil {
				l.Log.Warn("refused by a peer plugin: another user, or it requires a cluster secret and this engine has none; set the same cluster_secret in the "+l.Name+" plugin's config block of both engines", "peer", segment)
			}
		}
		return fail(ack.Status)
	case ack.Inc != inc:
		l.Stats.HelloRejected.Add(1)
		return fail(ring.StatusStaleIncarnation)
	case secret == nil && ack.Auth:
		l.Stats.Malformed.Add(1)
		return fail(ring.StatusProtocol) // a proof for a hello that asked for none
	case secret != nil && !ack.Auth:
		l.Stats.AuthFailed.Add(1)
		l.Log.Warn("refused a peer plugin: it has no cluster secret and this engine has one; set the same cluster_secret in the "+l.Name+" plugin's config block of both engines, or remove it from this one", "peer", segment)
		return fail(ring.StatusPermission)
	case secret != nil && !Verify(ack.MAC, secret, l.Label, "server", segment, inc, &hello.Nonce, &ack.Nonce):
		l.Stats.AuthFailed.Add(1)
		l.Log.Warn("refused a peer plugin: its proof of the cluster secret does not verify (another secret, or not a plugin of this cluster); give both engines the same cluster_secret", "peer", segment)
		return fail(ring.StatusPermission)
	}
	if secret != nil {
		a := Msg{Type: MsgAuth, Auth: true, MAC: Proof(secret, l.Label, "dialer", segment, inc, &ack.Nonce, &hello.Nonce)}
		if err := cn.Send(a, -1); err != nil {
			l.Stats.DialFailures.Add(1)
			return fail(ring.StatusPeerUnreachable)
		}
	}
	if !stop() {
		return fail(ring.StatusShutdown) // closed while we said hello
	}
	l.Stats.ConnsDialed.Add(1)
	l.Stats.ConnsOpen.Add(1)
	return cn, ring.StatusOK
}
