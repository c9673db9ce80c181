package tcp_test

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

const (
	secretX = "0123456789abcdef-cluster-x"
	secretY = "0123456789abcdef-cluster-y"
)

func TestClusterSecret(t *testing.T) {
	// io_timeout is long: a mismatch must fail at once, on what the peers
	// say to each other, not when something times out.
	const base = "io_timeout = \"1h\"\n"
	withX, withY := base+`cluster_secret = "`+secretX+`"`, base+`cluster_secret = "`+secretY+`"`
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secretX+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withXFile := base + `cluster_secret_file = "` + file + `"`
	cases := []struct {
		name             string
		configA, configB string
		want             ring.Status
		dialerSays       string // in A's log (A dials)
		listenerSays     string // in B's log
	}{
		{"same secret", withX, withX, ring.StatusOK, "", ""},
		{"same secret, one from a file", withX, withXFile, ring.StatusOK, "", ""},
		{"no secret", base, base, ring.StatusOK, "", ""},
		{"different secrets", withX, withY, ring.StatusPermission,
			"the peer's proof does not verify", "the dialer could not verify this engine's proof"},
		{"secret on the dialer only", withX, base, ring.StatusPermission,
			"this engine has a cluster secret and the peer has none", "the dialer has a cluster secret and this engine has none"},
		{"secret on the listener only", base, withY, ring.StatusPermission,
			"the peer requires a cluster secret and this engine has none", "the dialer has no cluster secret and this engine has one"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			logA, logB := newLogSink(), newLogSink()
			w := newLoggedWorld(t, 1<<20, tc.configA, tc.configB, logA, logB)
			fill(w.src, 1)
			fill(w.rw, 2)
			fill(w.dst, 3)
			rw, dst := snapshot(w.rw), snapshot(w.dst)
			wr := w.do(t, write(aSrc, 0, bRW, 0, 1<<16))
			rd := w.do(t, read(aDst, 0, bRW, 1<<17, 1<<16))
			if wr.Status != tc.want || rd.Status != tc.want {
				t.Fatalf("write: %v, read: %v; want %v", wr.Status, rd.Status, tc.want)
			}
			if tc.want == ring.StatusOK {
				plugintest.MustEqual(t, "written", w.rw[:1<<16], w.src[:1<<16])
				plugintest.MustEqual(t, "read", w.dst[:1<<16], w.rw[1<<17:1<<17+1<<16])
				for _, e := range []*engine{w.a, w.b} {
					if n := e.stat(t, "auth_failures"); n != 0 {
						t.Errorf("%s: auth_failures = %d", e.name, n)
					}
				}
				return
			}
			// Both sides say what is wrong and what to do.
			if logA.count("cluster secret mismatch", tc.dialerSays, "cluster_secret") == 0 {
				t.Errorf("A's log does not say %q with what to do:\n%s", tc.dialerSays, logA)
			}
			logB.waitFor(t, "cluster secret mismatch", tc.listenerSays, "cluster_secret")
			if n := w.b.stat(t, "auth_failures"); n == 0 {
				t.Errorf("B: auth_failures = 0")
			}
			if n := w.a.stat(t, "auth_failures"); n == 0 {
				t.Errorf("A: auth_failures = 0")
			}
			// B served nothing and touched nothing.
			for _, c := range []string{"frames_in", "bytes_received", "bytes_sent"} {
				if n := w.b.stat(t, c); n != 0 {
					t.Errorf("B: %s = %d", c, n)
				}
			}
			plugintest.MustEqual(t, "B's memory", w.rw, rw)
			plugintest.MustEqual(t, "A's memory", w.dst, dst)
		})
	}
}

// authClient speaks the dialer's side of the authenticated handshake from
// the wire specification, independently of the plugin's code.
type authClient struct {
	secret        string
	dialerNonce   [tcp.NonceSize]byte
	listenerNonce [tcp.NonceSize]byte
	reply         tcp.HelloReply
	listenerMAC   [tcp.MACSize]byte
}

func specMAC(secret, label string, version, flags uint16, nd, nl [tcp.NonceSize]byte, helloInc, replyInc, maxFrame uint64, name string) [tcp.MACSize]byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(label))
	m.Write(binary.LittleEndian.AppendUint16(nil, version))
	m.Write(binary.LittleEndian.AppendUint16(nil, flags))
	m.Write(nd[:])
	m.Write(nl[:])
	m.Write(binary.LittleEndian.AppendUint64(nil, helloInc))
	m.Write(binary.LittleEndian.AppendUint64(nil, replyInc))
	m.Write(binary.LittleEndian.AppendUint64(nil, maxFrame))
	m.Write(binary.LittleEndian.AppendUint16(nil, uint16(len(name))))
	m.Write([]byte(name))
	return [tcp.MACSize]byte(m.Sum(nil))
}

const (
	labelListener = "ferry tcp auth v1: listener proof"
	labelDialer   = "ferry tcp auth v1: dialer proof  "
)

// hello sends an authenticated hello to e, reads the reply and the
// listener's proof, and checks the proof.
func (a *authClient) hello(t *testing.T, c net.Conn, e *engine) {
	t.Helper()
	if a.dialerNonce == ([tcp.NonceSize]byte{}) {
		_, _ = rand.Read(a.dialerNonce[:])
	}
	mustWrite(t, c, tcp.AppendHello(nil, tcp.Hello{Version: tcp.ProtocolVersion, Flags: tcp.FlagAuth,
		Incarnation: e.incarnation, Segment: e.name, Nonce: a.dialerNonce}))
	var b [tcp.HelloReplySize + tcp.ProofSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		t.Fatalf("hello reply and proof: %v", err)
	}
	r, err := tcp.DecodeHelloReply(b[:tcp.HelloReplySize])
	if err != nil || r.Status != ring.StatusOK || r.Flags != tcp.FlagAuth {
		t.Fatalf("hello reply %+v, %v", r, err)
	}
	var p tcp.Proof
	if err := tcp.DecodeProof(b[tcp.HelloReplySize:], &p); err != nil || p.Status != ring.StatusOK {
		t.Fatalf("listener's proof %+v, %v", p, err)
	}
	a.reply, a.listenerNonce, a.listenerMAC = r, p.Nonce, p.MAC
	if want := a.mac(labelListener, e); p.MAC != want {
		t.Fatalf("listener's proof does not verify as the wire specification says")
	}
}

func (a *authClient) mac(label string, e *engine) [tcp.MACSize]byte {
	return specMAC(a.secret, label, tcp.ProtocolVersion, a.reply.Flags, a.dialerNonce, a.listenerNonce,
		e.incarnation, a.reply.Incarnation, a.reply.MaxFrame, e.name)
}

func proof(mac [tcp.MACSize]byte) []byte {
	b := make([]byte, tcp.ProofSize)
	tcp.EncodeProof(b, &tcp.Proof{MAC: mac})
	return b
}

// TestAuthenticationProofs plays a dialer that follows the specification
// and hostile ones that do not, against a listener with a secret.
func TestAuthenticationProofs(t *testing.T) {
	b := startEngine(t, "engine-b", 200, `cluster_secret = "`+secretX+`"`+"\nhandshake_timeout = \"250ms\"")
	mem := make([]byte, 1<<16)
	fill(mem, 5)
	b.register(t, bRW, mem, sdk.PermRemoteReadWrite)
	before := snapshot(mem)
	payload := make([]byte, 100)
	fill(payload, 6)
	wr := header(tcp.Header{Op: ring.OpWrite, Seq: 1, Incarnation: b.incarnation, Region: bRW, Offset: 0, Length: uint64(len(payload))})

	cases := []struct {
		name    string
		counter string
		run     func(t *testing.T, c *net.TCPConn)
	}{
		{"proof made with another secret", "auth_failures", func(t *testing.T, c *net.TCPConn) {
			a := &authClient{secret: secretX}
			a.hello(t, c, b)
			a.secret = secretY
			mustWrite(t, c, append(proof(a.mac(labelDialer, b)), wr...))
		}},
		{"listener's proof reflected", "auth_failures", func(t *testing.T, c *net.TCPConn) {
			a := &authClient{secret: secretX}
			a.hello(t, c, b)
			mustWrite(t, c, append(proof(a.listenerMAC), wr...))
		}},
		{"dialer's proof replayed from another connection", "auth_failures", func(t *testing.T, c *net.TCPConn) {
			// A whole transcript of a good connection, replayed: the
			// listener's nonce differs, so the proof does not verify.
			first := dialRaw(t, b)
			a := &authClient{secret: secretX}
			a.hello(t, first, b)
			good := proof(a.mac(labelDialer, b))
			mustWrite(t, first, good)
			first.Close()
			again := &authClient{secret: secretX, dialerNonce: a.dialerNonce}
			again.hello(t, c, b)
			if again.listenerNonce == a.listenerNonce {
				t.Fatal("the listener used the same nonce twice")
			}
			mustWrite(t, c, append(good, wr...))
		}},
		{"dialer says the listener's proof failed", "auth_failures", func(t *testing.T, c *net.TCPConn) {
			a := &authClient{secret: secretX}
			a.hello(t, c, b)
			p := make([]byte, tcp.ProofSize)
			tcp.EncodeProof(p, &tcp.Proof{Status: ring.StatusPermission})
			mustWrite(t, c, p)
		}},
		{"hello without a secret", "auth_failures", func(t *testing.T, c *net.TCPConn) {
			r := hello(t, c, tcp.Hello{Version: tcp.ProtocolVersion, Incarnation: b.incarnation, Segment: b.name})
			if r.Status != ring.StatusPermission || r.Flags != tcp.FlagAuth {
				t.Errorf("reply %+v, want StatusPermission with FlagAuth", r)
			}
		}},
		{"request instead of a proof", "conns_dropped_malformed", func(t *testing.T, c *net.TCPConn) {
			a := &authClient{secret: secretX}
			a.hello(t, c, b)
			mustWrite(t, c, append(wr, payload...))
		}},
		{"truncated proof", "conns_dropped_truncated", func(t *testing.T, c *net.TCPConn) {
			a := &authClient{secret: secretX}
			a.hello(t, c, b)
			mustWrite(t, c, proof(a.mac(labelDialer, b))[:30])
			c.CloseWrite()
		}},
		{"no proof", "conns_handshake_timeout", func(t *testing.T, c *net.TCPConn) {
			a := &authClient{secret: secretX}
			a.hello(t, c, b)
		}},
	}

	t.Run("good proof", func(t *testing.T) {
		c := dialRaw(t, b)
		a := &authClient{secret: secretX}
		a.hello(t, c, b)
		mustWrite(t, c, proof(a.mac(labelDialer, b)))
		mustWrite(t, c, wr)
		mustWrite(t, c, payload)
		if r := response(t, c); r.Status != ring.StatusOK || r.Seq != 1 {
			t.Fatalf("response %+v", r)
		}
		plugintest.MustEqual(t, "written", mem[:len(payload)], payload)
		copy(mem, before) // what follows must not change it again
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := b.stat(t, tc.counter)
			c := dialRaw(t, b)
			tc.run(t, c)
			dropped(t, c)
			if got := b.stat(t, tc.counter); got != n+1 {
				t.Errorf("%s went from %d to %d, want +1", tc.counter, n, got)
			}
		})
	}
	plugintest.MustEqual(t, "B's memory", mem, before)
	if n := b.stat(t, "frames_in"); n != 1 {
		t.Errorf("frames_in = %d, want 1 (the good proof's write)", n)
	}
}

// TestOpenPortWarning: without a cluster secret Start says once, at info
// (the engine's one warning lists the plugin), for every listen address:
// on a loopback address every local user is a peer.
func TestOpenPortWarning(t *testing.T) {
	const warning = "the tcp transport accepts transfers from anyone who can reach"
	const local = "a loopback address: any user or process of this machine"
	cases := []struct {
		config string
		want   []string // what the warning names; nil: no warning
	}{
		{`listen = ["0.0.0.0:0"]`, []string{"0.0.0.0:"}},
		{`listen = ["127.0.0.1:0", "0.0.0.0:0"]`, []string{"127.0.0.1:", "0.0.0.0:"}},
		{`listen = ["127.0.0.1:0"]`, []string{"127.0.0.1:", local}},
		{`listen = ["localhost:0"]`, []string{"localhost:", local}},
		{"listen = [\"0.0.0.0:0\"]\ncluster_secret = \"" + secretX + "\"", nil},
		{"listen = [\"127.0.0.1:0\"]\ncluster_secret = \"" + secretX + "\"", nil},
	}
	for _, tc := range cases {
		log := newLogSink()
		tr := tcp.New(tcp.WithLogger(log.logger()))
		if _, err := tr.Start(context.Background(), sdk.StartConfig{Engine: "e", Config: []byte(tc.config)}); err != nil {
			t.Fatalf("%s: %v", tc.config, err)
		}
		if err := tr.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		parts := append([]string{"[INFO]", warning, "set cluster_secret in the tcp plugin's config block"}, tc.want...)
		got := log.count(parts...)
		if want := map[bool]int{true: 1, false: 0}[tc.want != nil]; got != want || log.count(warning) != want {
			t.Errorf("%s: %d warnings naming %q, want %d; log:\n%s", tc.config, got, tc.want, want, log)
		}
		if tc.want == nil && strings.Contains(log.String(), "[WARN]") {
			t.Errorf("%s: unexpected warning:\n%s", tc.config, log)
		}
		if len(tc.want) > 1 && tc.want[1] != local && log.count(local) != 0 {
			t.Errorf("%s: a non-loopback listener called loopback:\n%s", tc.config, log)
		}
	}
}
