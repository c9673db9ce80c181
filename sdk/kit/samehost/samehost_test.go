package samehost_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/sdk/kit/samehost"
	"github.com/ferrydev/ferry/sdk/ring"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testCodec is a wire format for tests only: the fields the exchange
// itself uses, then the name.
type testCodec struct{}

const testHeader = 1 + 4 + 4 + 8 + 1 + samehost.NonceLen + samehost.MACLen

func (testCodec) MaxLen() int { return testHeader + samehost.MaxNameLen }
func (testCodec) Append(b []byte, m *samehost.Msg) []byte {
	b = append(b, m.Type)
	b = binary.LittleEndian.AppendUint32(b, uint32(m.Status))
	b = binary.LittleEndian.AppendUint32(b, m.Region)
	b = binary.LittleEndian.AppendUint64(b, m.Inc)
	auth := byte(0)
	if m.Auth {
		auth = 1
	}
	b = append(append(append(b, auth), m.Nonce[:]...), m.MAC[:]...)
	return append(b, m.Name...)
}
func (testCodec) Decode(b []byte) (samehost.Msg, error) {
	var m samehost.Msg
	if len(b) < testHeader {
		return m, fmt.Errorf("%w: %d bytes", samehost.ErrMalformed, len(b))
	}
	m.Type = b[0]
	m.Status = ring.Status(int32(binary.LittleEndian.Uint32(b[1:])))
	m.Region = binary.LittleEndian.Uint32(b[5:])
	m.Inc = binary.LittleEndian.Uint64(b[9:])
	m.Auth = b[17] == 1
	copy(m.Nonce[:], b[18:])
	copy(m.MAC[:], b[18+samehost.NonceLen:])
	m.Name = string(b[testHeader:])
	return m, nil
}

func link(label string, secret []byte) *samehost.Link {
	return &samehost.Link{Name: "test", Label: label, Codec: testCodec{}, Secret: secret, Log: hclog.NewNullLogger(), Stats: new(samehost.Counters)}
}

// TestProofLabel: a proof made under one transport's label does not pass
// for another's, nor for the other role.
func TestProofLabel(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	a, b := samehost.NewNonce(), samehost.NewNonce()
	p := samehost.Proof(secret, "ferry-shm/1", "server", "seg", 3, &a, &b)
	if !samehost.Verify(p, secret, "ferry-shm/1", "server", "seg", 3, &a, &b) {
		t.Fatal("a proof does not verify")
	}
	if samehost.Verify(p, secret, "ferry-nvlink/1", "server", "seg", 3, &a, &b) {
		t.Fatal("shm's proof passes for nvlink's")
	}
	if samehost.Verify(p, secret, "ferry-shm/1", "dialer", "seg", 3, &a, &b) {
		t.Fatal("the server's proof passes for the dialer's")
	}
}

// TestHello: the dialer gets through with the right segment, incarnation
// and secret, and is refused otherwise.
func TestHello(t *testing.T) {
	s1, s2 := []byte("secret-one-0123456789"), []byte("secret-two-0123456789")
	cases := []struct {
		name             string
		dial, serve      []byte
		dialLabel, label string
		inc              uint64
		want             ring.Status
	}{
		{"same secret", s1, s1, "l/1", "l/1", 7, ring.StatusOK},
		{"no secret", nil, nil, "l/1", "l/1", 7, ring.StatusOK},
		{"stale incarnation", s1, s1, "l/1", "l/1", 6, ring.StatusStaleIncarnation},
		{"another secret", s2, s1, "l/1", "l/1", 7, ring.StatusPermission},
		{"dialer without", nil, s1, "l/1", "l/1", 7, ring.StatusPermission},
		{"server without", s1, nil, "l/1", "l/1", 7, ring.StatusPermission},
		{"another label", s1, s1, "other/1", "l/1", 7, ring.StatusPermission},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var mu sync.Mutex
			srvLink := link(c.label, c.serve)
			srv := &samehost.Server{Link: srvLink, Mu: &mu, Engine: "seg", Incarnation: 7, RevokeTimeout: 1e9,
				Answer: func(sc *samehost.ServerConn, region uint32) error {
					return sc.Send(samehost.Msg{Type: samehost.MsgRegion, Region: region, Status: ring.StatusNotRegistered}, -1)
				}}
			ln, name, err := srvLink.Listen("seg", 7)
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			srv.Serve(ln)
			mu.Unlock()
			defer srv.Close()
			cn, st := link(c.dialLabel, c.dial).Dial(context.Background(), name, "seg", c.inc)
			if st != c.want {
				t.Fatalf("dial: %v, want %v", st, c.want)
			}
			if cn == nil {
				return
			}
			defer cn.Close()
			if err := cn.Send(samehost.Msg{Type: samehost.MsgQuery, Region: 4}, -1); err != nil {
				t.Fatal(err)
			}
			m, _, err := samehost.NewReader(testCodec{}).Read(cn.C)
			if err != nil || m.Type != samehost.MsgRegion || m.Region != 4 || m.Status != ring.StatusNotRegistered {
				t.Fatalf("answer %+v, %v", m, err)
			}
		})
	}
}
