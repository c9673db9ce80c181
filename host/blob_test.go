package host_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

// blobEngine starts an engine with no metastore (kind "none"), with the
// cluster secret file secret ("" for none).
func blobEngine(t *testing.T, name, secret string) *host.Engine {
	t.Helper()
	cfg := config.Default(name)
	cfg.PluginDir = binDir
	cfg.Metastore = config.Metastore{Kind: config.MetastoreNone}
	cfg.ClusterSecretFile, cfg.ClusterSecret = secret, nil // this secret, or none: not Default's
	e, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// exchange has from export its segment into a file and to import it from
// there, as two processes sharing a directory would.
func exchange(t *testing.T, from, to *host.Engine, opts ...host.ImportOption) (host.Segment, []byte, error) {
	t.Helper()
	blob, err := from.ExportSegment()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "segment.blob")
	if err := os.WriteFile(path, blob, 0o600); err != nil {
		t.Fatal(err)
	}
	read, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := to.ImportSegment(context.Background(), read, opts...)
	return seg, read, err
}

// resealBlob recomputes a blob's trailing sha256 after an edit, as a
// deliberate tamperer would.
func resealBlob(b []byte) []byte {
	end := len(b) - sha256.Size
	s := sha256.Sum256(b[:end])
	copy(b[end:], s[:])
	return b
}

// TestBlobsWithoutMetastore: two engines with metastore kind "none"
// exchange blobs through a file and move verified bytes over every
// transport both run; opening by name fails clearly; and each bad blob is
// refused with a clear error and leaves the good handle working.
func TestBlobsWithoutMetastore(t *testing.T) {
	const n = 1<<20 + 13
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, b := blobEngine(t, "blob-a", ""), blobEngine(t, "blob-b", "")
	la, _ := a.Allocate(n)
	if _, err := a.Register(ctx, la, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	lb, rb := remoteBuffer(t, ctx, b, n)

	_, err := a.OpenSegment(ctx, "blob-b")
	if !errors.Is(err, host.ErrSegmentNotFound) || !strings.Contains(err.Error(), "no metastore") || !strings.Contains(err.Error(), "import a blob") {
		t.Fatalf("OpenSegment by name with no metastore: %v; want ErrSegmentNotFound saying no metastore: import a blob", err)
	}

	seg, blob, err := exchange(t, b, a, host.ExpectName("blob-b"))
	if err != nil {
		t.Fatal(err)
	}
	if seg.Name != "blob-b" || seg.Incarnation != b.Incarnation() || seg.MachineID != b.MachineID() || len(seg.Buffers) != 1 || seg.Buffers[0].Base != rb {
		t.Fatalf("imported %+v; want blob-b at incarnation %#x with its buffer at %#x", seg, b.Incarnation(), rb)
	}
	if len(seg.Transports) < 2 {
		t.Fatalf("the imported segment offers %v, want tcp and shm", seg.Transports)
	}
	moved := func(t *testing.T, tr string, seed uint64) {
		t.Helper()
		copy(la, pattern(n, 0, seed))
		if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: la, Segment: seg.ID, Remote: rb, Transport: tr}); err != nil {
			t.Fatalf("%s write: %v", tr, err)
		}
		if !bytes.Equal(lb, la) {
			t.Fatalf("%s write: the peer's bytes differ", tr)
		}
		clear(la)
		copy(lb, pattern(n, 0, seed+1))
		if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: la[7:], Segment: seg.ID, Remote: rb + 7, Transport: tr}); err != nil {
			t.Fatalf("%s read: %v", tr, err)
		}
		if !bytes.Equal(la[7:], lb[7:]) {
			t.Fatalf("%s read: the bytes read differ from the peer's", tr)
		}
	}
	for i, tr := range seg.Transports {
		moved(t, tr, uint64(10*i+1))
	}

	edit := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), blob...)) }
	mid := bytes.Index(blob, []byte(`"machine_id":"`)) + len(`"machine_id":"`)
	other := blobEngine(t, "blob-c", "")
	otherBlob, err := other.ExportSegment()
	if err != nil {
		t.Fatal(err)
	}
	bad := []struct {
		name   string
		blob   []byte
		opts   []host.ImportOption
		saying string
	}{
		{"tampered", edit(func(b []byte) []byte { b[mid] ^= 0x20; return b }), nil, "checksum does not match"},
		{"truncated", blob[:len(blob)/2], nil, "truncated"},
		{"empty", nil, nil, "truncated"},
		{"another engine", otherBlob, []host.ImportOption{host.ExpectName("blob-b")}, `describes engine "blob-c", and "blob-b" was expected`},
		{"wrong version", edit(func(b []byte) []byte { binary.BigEndian.PutUint16(b[8:], 9); return resealBlob(b) }), nil, "version 9, this engine reads version 1"},
		{"not a blob", []byte(strings.Repeat(`{"schema":1}`, 10)), nil, "not from Engine.ExportSegment"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			s, err := a.ImportSegment(ctx, c.blob, c.opts...)
			if err == nil {
				t.Fatalf("ImportSegment accepted it: %+v", s)
			}
			if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), c.saying) || !strings.Contains(err.Error(), "import segment") {
				t.Fatalf("ImportSegment: %v; want ErrInvalid saying %q", err, c.saying)
			}
			if _, _, _, ok := host.SegmentHandle(a, seg.ID+1); ok {
				t.Fatal("a refused blob opened a segment")
			}
		})
	}
	// Nothing the refusals did touched the good handle.
	moved(t, seg.Transports[0], 99)

	// The same blob again is the same life: the handle is reused.
	again, err := a.ImportSegment(ctx, blob)
	if err != nil || again.ID != seg.ID {
		t.Fatalf("importing the same blob again: %+v, %v; want handle %d", again, err, seg.ID)
	}
}

// TestBlobsSigned: with a cluster secret, a blob is signed; one tampered
// with and resealed (checksum recomputed), one from an engine with
// another secret, and an unsigned one are refused as such.
func TestBlobsSigned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	secret := secretFile(t, signSecret)
	a, b := blobEngine(t, "blobs-a", secret), blobEngine(t, "blobs-b", secret)
	lb, _ := b.Allocate(4096)
	if _, err := b.Register(ctx, lb, host.RemoteRead); err != nil {
		t.Fatal(err)
	}
	seg, blob, err := exchange(t, b, a)
	if err != nil {
		t.Fatalf("a signed blob from an engine with the same secret: %v", err)
	}
	if seg.Name != "blobs-b" {
		t.Fatalf("imported %+v", seg)
	}
	mid := bytes.Index(blob, []byte(`"machine_id":"`)) + len(`"machine_id":"`)
	forged := append([]byte(nil), blob...)
	forged[mid] = map[bool]byte{true: 'b', false: 'a'}[forged[mid] == 'a'] // another hex digit: the JSON stays valid
	resealBlob(forged)
	stranger := blobEngine(t, "blobs-x", secretFile(t, "another-cluster-secret-abcdefghij"))
	strangerBlob, err := stranger.ExportSegment()
	if err != nil {
		t.Fatal(err)
	}
	open := blobEngine(t, "blobs-o", "")
	unsignedBlob, err := open.ExportSegment()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, saying string
		blob         []byte
	}{
		{"tampered and resealed", "not signed with this engine's cluster secret", forged},
		{"another secret", "not signed with this engine's cluster secret", strangerBlob},
		{"unsigned", "carries no MAC", unsignedBlob},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := a.ImportSegment(ctx, c.blob)
			if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), c.saying) || !strings.Contains(err.Error(), "refused so far") {
				t.Fatalf("ImportSegment: %v; want ErrInvalid saying %q and the count", err, c.saying)
			}
		})
	}
	// An engine without a secret reads a signed blob (it checks only the
	// checksum), as it reads signed descriptors.
	if _, _, err := exchange(t, b, open); err != nil {
		t.Fatalf("an engine without a secret refused a signed blob: %v", err)
	}
}

// TestBlobOfEarlierLife: a blob exported before its engine restarted is
// found out on first use. The write through it fails, never reaching the
// new life; the error names the new incarnation (the engine asked the
// peer's control service, whose address the blob carries) and says to
// import a new blob; the blob of the new life works.
func TestBlobOfEarlierLife(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	block := "kind = \"none\""
	a := engineFrom(t, engineHCL(t, "blobr-a", block, "127.0.0.1:0"))
	bcfg := engineHCL(t, "blobr-b", block, fmt.Sprintf("127.0.0.1:%d", metastoretest.FreePort(t)))
	f, err := os.OpenFile(bcfg, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "control {\n  listen = %q\n}\n", fmt.Sprintf("127.0.0.1:%d", metastoretest.FreePort(t)))
	f.Close()
	cfg, err := config.Load(bcfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := b.Allocate(1 << 20)
	if _, err := b.Register(ctx, lb, host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	seg, _, err := exchange(t, b, a)
	if err != nil {
		t.Fatal(err)
	}
	local, _ := a.Allocate(64 << 10)
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	copy(local, pattern(len(local), 0, 3))
	write := host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: seg.Buffers[0].Base}
	if err := a.Transfer(ctx, write); err != nil {
		t.Fatal(err)
	}
	b.Close()

	b2 := engineFrom(t, bcfg)
	lb2, _ := b2.Allocate(1 << 20)
	if _, err := b2.Register(ctx, lb2, host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	before := sum(lb2)
	tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
	err = a.Transfer(tctx, write)
	tcancel()
	transferErr(t, "write through the blob of the earlier life", err, host.StateFailed, host.ErrSegmentNotFound, "restarted")
	if !strings.Contains(err.Error(), fmt.Sprintf("now incarnation %#x", b2.Incarnation())) {
		t.Fatalf("write through the stale blob: %v; want it to name the new incarnation %#x", err, b2.Incarnation())
	}
	if sum(lb2) != before {
		t.Fatal("a write addressed to the earlier life changed the new life's memory")
	}
	err = a.Transfer(ctx, write)
	transferErr(t, "write through the retired handle", err, host.StateInvalid, host.ErrSegmentNotFound, "import a blob of its new life")

	seg2, _, err := exchange(t, b2, a)
	if err != nil {
		t.Fatal(err)
	}
	write.Segment, write.Remote = seg2.ID, seg2.Buffers[0].Base
	if err := a.Transfer(ctx, write); err != nil {
		t.Fatalf("write through the new life's blob: %v", err)
	}
	if !bytes.Equal(lb2[:len(local)], local) {
		t.Fatal("the new life's bytes differ from what was written")
	}
}

// TestBlobPeerAddressTaken: when another engine answers at the control
// address a blob names (the peer is gone and its port reused), a failed
// transfer says so, and the handle is not retired as if the peer had
// restarted: nothing was learnt about it.
func TestBlobPeerAddressTaken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	block := "kind = \"none\""
	control := fmt.Sprintf("127.0.0.1:%d", metastoretest.FreePort(t))
	withControl := func(path string) string {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "control {\n  listen = %q\n}\n", control)
		f.Close()
		return path
	}
	a := engineFrom(t, engineHCL(t, "blobt-a", block, "127.0.0.1:0"))
	cfg, err := config.Load(withControl(engineHCL(t, "blobt-b", block, "127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	b, err := host.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := b.Allocate(4096)
	if _, err := b.Register(ctx, lb, host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	seg, _, err := exchange(t, b, a)
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	engineFrom(t, withControl(engineHCL(t, "blobt-c", block, "127.0.0.1:0")))

	local, _ := a.Allocate(4096)
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	tctx, tcancel := context.WithTimeout(ctx, 10*time.Second)
	err = a.Transfer(tctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: seg.Buffers[0].Base})
	tcancel()
	if err == nil || !strings.Contains(err.Error(), `now answers for engine "blobt-c"`) {
		t.Fatalf("write to the gone peer: %v; want it to say another engine answers at its control address", err)
	}
	if retired, _, _, _ := host.SegmentHandle(a, seg.ID); retired != "" {
		t.Fatalf("the handle was retired on another engine's descriptor: %s", retired)
	}
}
