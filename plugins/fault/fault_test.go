package fault_test

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

const (
	incA, incB = 0xa1, 0xb2
	regLocal   = 1 // on A
	regRemote  = 1 // on B, remote read-write
	peerB      = 1
	regionSize = 1 << 20
	chunk      = 4096
)

const tcpBlock = "tcp {\n  listen = [\"127.0.0.1:0\"]\n}\n"

var tokens atomic.Uint64

func token() uint64 { return tokens.Add(1) }

// TestConformance: with no fault configured the plugin is a conforming
// transport.
func TestConformance(t *testing.T) {
	plugintest.Run(t, plugintest.Config{
		Binary:  binary,
		ConfigA: []byte(tcpBlock),
		ConfigB: []byte("tcp {\n  listen = [\"127.0.0.1:0\"]\n  connections_per_peer = 4\n}\n"),
	})
}

// pair starts A, the plugin under test with faults, and B, a fault plugin
// with none (plain TCP), and returns A's local memory and B's region.
func pair(t *testing.T, faults string) (a, b *plugintest.Instance, local, remote []byte) {
	t.Helper()
	name := strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
	b = launch(t, name+"-b", incB, tcpBlock)
	a = launch(t, name+"-a", incA, faults+"\n"+tcpBlock)
	local = a.Region(regLocal, regionSize, sdk.PermLocal)
	remote = b.Region(regRemote, regionSize, sdk.PermRemoteReadWrite)
	a.OpenPeer(peerB, b, incB)
	return a, b, local, remote
}

func fillPattern(p []byte, seed byte) {
	for i := range p {
		p[i] = seed + byte(i*7)
	}
}

func desc(op ring.Op, i int) ring.Descriptor {
	off := uint64(i * chunk)
	return ring.Descriptor{Token: token(), Op: op, LocalRegion: regLocal, LocalOffset: off, Peer: peerB, RemoteRegion: regRemote, RemoteOffset: off, Length: chunk}
}

func TestDrop(t *testing.T) {
	for _, tc := range []struct {
		status string
		want   ring.Status
	}{{"io", ring.StatusIO}, {"peer_unreachable", ring.StatusPeerUnreachable}} {
		t.Run(tc.status, func(t *testing.T) {
			a, _, local, remote := pair(t, fmt.Sprintf("fault \"drop\" {\n  after = 2\n  every = 3\n  status = %q\n}", tc.status))
			const n = 12
			fillPattern(local[:n*chunk], 1)
			var ds []ring.Descriptor
			for i := range n {
				ds = append(ds, desc(ring.OpWrite, i))
			}
			chs := a.Submit(ds...)
			dropped := 0
			for i, ch := range chs {
				c := a.Wait(ch, ds[i].Token)
				span := remote[i*chunk : (i+1)*chunk]
				if i >= 2 && (i-2)%3 == 0 {
					dropped++
					if c.Status != tc.want || c.Length != 0 {
						t.Errorf("descriptor %d: %v, %d bytes; want %v, 0 bytes", i, c.Status, c.Length, tc.want)
					}
					if !bytes.Equal(span, make([]byte, chunk)) {
						t.Errorf("descriptor %d was dropped but its bytes reached the peer", i)
					}
					continue
				}
				if c.Status != ring.StatusOK || c.Length != chunk {
					t.Errorf("descriptor %d: %v, %d bytes; want OK", i, c.Status, c.Length)
				}
				if !bytes.Equal(span, local[i*chunk:(i+1)*chunk]) {
					t.Errorf("descriptor %d: target bytes differ", i)
				}
			}
			s := a.Stats()
			if s["dropped"] != uint64(dropped) || s["descriptors"] != n {
				t.Errorf("stats dropped=%d descriptors=%d, want %d and %d", s["dropped"], s["descriptors"], dropped, n)
			}
		})
	}
}

func TestDelay(t *testing.T) {
	const delay = 200 * time.Millisecond
	a, _, local, remote := pair(t, "fault \"delay\" {\n  after = 2\n  delay = \"200ms\"\n}")
	fillPattern(local[:8*chunk], 3)
	for i := range 5 {
		start := time.Now()
		c := a.Do(desc(ring.OpWrite, i))
		took := time.Since(start)
		if c.Status != ring.StatusOK || c.Length != chunk {
			t.Fatalf("descriptor %d: %v, %d bytes", i, c.Status, c.Length)
		}
		if i >= 2 && took < delay {
			t.Errorf("descriptor %d completed after %v, want at least %v", i, took, delay)
		}
		if !bytes.Equal(remote[i*chunk:(i+1)*chunk], local[i*chunk:(i+1)*chunk]) {
			t.Errorf("descriptor %d: target bytes differ", i)
		}
	}
	if s := a.Stats(); s["delayed"] != 3 {
		t.Errorf("stats delayed=%d, want 3", s["delayed"])
	}
}

func TestCorrupt(t *testing.T) {
	a, _, local, remote := pair(t, "fault \"corrupt\" {\n  after = 1\n  every = 2\n}")
	const n = 7 // reads 0..6; the write below is descriptor 7, chosen
	fillPattern(remote[:n*chunk], 5)
	corrupted := 0
	for i := range n {
		c := a.Do(desc(ring.OpRead, i))
		same := bytes.Equal(remote[i*chunk:(i+1)*chunk], local[i*chunk:(i+1)*chunk])
		if i%2 == 1 {
			corrupted++
			if c.Status != ring.StatusIO {
				t.Errorf("read %d: %v, want %v", i, c.Status, ring.StatusIO)
			}
			if same {
				t.Errorf("read %d: reported corrupt but the local bytes are intact", i)
			}
			continue
		}
		if c.Status != ring.StatusOK || !same {
			t.Errorf("read %d: %v, bytes equal %v; want OK and equal", i, c.Status, same)
		}
	}
	// A chosen write is sent, then reported failed.
	w := a.Do(desc(ring.OpWrite, n))
	if w.Status != ring.StatusIO {
		t.Errorf("write: %v, want %v", w.Status, ring.StatusIO)
	}
	corrupted++
	if s := a.Stats(); s["corrupted"] != uint64(corrupted) {
		t.Errorf("stats corrupted=%d, want %d", s["corrupted"], corrupted)
	}
}

func TestStall(t *testing.T) {
	const after = 3
	a, _, local, _ := pair(t, fmt.Sprintf("fault \"stall\" {\n  after = %d\n}", after))
	a.ExpectGone() // a stalled plugin is killed, as the host would
	fillPattern(local[:8*chunk], 7)
	for i := range after {
		if c := a.Do(desc(ring.OpWrite, i)); c.Status != ring.StatusOK {
			t.Fatalf("descriptor %d before the stall: %v", i, c.Status)
		}
	}
	ds := []ring.Descriptor{desc(ring.OpWrite, after), desc(ring.OpRead, after+1), {Token: token(), Op: ring.OpNop}}
	chs := a.Submit(ds...)
	deadline := time.After(300 * time.Millisecond)
	for i, ch := range chs {
		select {
		case c := <-ch:
			t.Fatalf("descriptor %d completed %v after the stall", i, c.Status)
		case <-deadline:
		}
		deadline = time.After(0)
	}
	select {
	case <-a.Process().Exited():
		t.Fatal("the stalled plugin exited")
	default:
	}
	// The control plane still answers: only the data path is stuck.
	if s := a.Stats(); s["stalled"] < 1 {
		t.Errorf("stats stalled=%d, want at least 1", s["stalled"])
	}
}

func TestCrash(t *testing.T) {
	const after = 2
	a, _, local, _ := pair(t, fmt.Sprintf("fault \"crash\" {\n  after = %d\n}", after))
	a.ExpectGone()
	fillPattern(local[:8*chunk], 9)
	for i := range after {
		if c := a.Do(desc(ring.OpWrite, i)); c.Status != ring.StatusOK {
			t.Fatalf("descriptor %d before the crash: %v", i, c.Status)
		}
	}
	select {
	case <-a.Process().Exited():
		t.Fatal("the plugin exited before the crash point")
	default:
	}
	a.Submit(desc(ring.OpWrite, after), desc(ring.OpWrite, after+1))
	select {
	case <-a.Process().Exited():
	case <-time.After(waitLimit):
		t.Fatal("the plugin did not exit after the crash point")
	}
}

func TestBadConfig(t *testing.T) {
	for _, tc := range []struct{ cfg, want string }{
		{"fault \"explode\" {}", `unknown fault "explode"`},
		{"fault \"delay\" {}", "needs delay"},
		{"fault \"drop\" {\n  status = \"bogus\"\n}", "status"},
		{"tcp {\n  connections_per_peer = 0\n}", "connections_per_peer"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			err := startErr(t, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start: %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}
