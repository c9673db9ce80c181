package host_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/host"
)

// TestSHMTargetPluginKilled kills the target engine's shm plugin with
// SIGKILL: a transfer pinned to shm fails with an error that names the
// real cause (the peer's plugin is unreachable, not "memory not
// registered"), and once the target's plugin runs again, transfers over
// shm work again.
func TestSHMTargetPluginKilled(t *testing.T) {
	ctx := context.Background()
	a := newEngine(t, "shmkill-a")
	b, err := host.New(ctx, joinConfig("shmkill-b", a.MetastoreURL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	// A page-aligned part of a larger allocation: carved into its own
	// memfd, which the restarted plugin gets again (Replay).
	const n = 1 << 20
	whole, err := b.Allocate(n + 128<<10)
	if err != nil {
		t.Fatal(err)
	}
	bmem := whole[64<<10 : 64<<10+n]
	remote, err := b.Register(ctx, bmem, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := a.OpenSegment(ctx, "shmkill-b")
	if err != nil {
		t.Fatal(err)
	}
	local := localBuffer(t, ctx, a, n)
	write := func() error {
		fillRandom(local)
		err := a.Transfer(ctx, host.Request{Op: host.Write, Local: local, Segment: seg.ID, Remote: remote, Transport: "shm"})
		if err == nil && string(bmem) != string(local) {
			t.Fatal("write over shm: the target's bytes differ")
		}
		return err
	}
	if err := write(); err != nil {
		t.Fatalf("write over shm before the kill: %v", err)
	}
	pid := host.PluginPID(b, "shm")
	restarts := pluginStatus(b, "shm").Restarts
	dropped := pluginStatus(a, "shm").Counters["maps_dropped"]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Once the initiator's plugin has seen its connection to the target's
	// end (and dropped the mapping), a write must fail for what happened,
	// unless the target's plugin is already back.
	waitFor(t, 30*time.Second, "the initiator's shm plugin drops the target's mapping", func() bool {
		return pluginStatus(a, "shm").Counters["maps_dropped"] > dropped
	})
	if err := write(); err != nil && (errors.Is(err, host.ErrNotRegistered) || !errors.Is(err, host.ErrTransportUnavailable)) {
		t.Fatalf("write after the target's shm plugin was killed: %v; want the transport unavailable (the target's plugin died), not %q", err, "memory not registered")
	} else {
		t.Logf("write while the target's shm plugin is dead or restarting: %v", err)
	}
	waitBack(t, b, "shm", restarts)
	// The target republishes its descriptor with the new plugin's socket;
	// the initiator re-opens the peer there.
	waitFor(t, 30*time.Second, "the initiator holds the restarted plugin's endpoint", func() bool {
		return string(host.PeerEndpoint(a, seg.ID, "shm")) == string(host.PluginEndpoint(b, "shm"))
	})
	if err := write(); err != nil {
		t.Fatalf("write over shm after the target's plugin restarted: %v", err)
	}
}

// shmClient speaks the shm plugin's region-exchange protocol (see
// plugins/shm/wire.go) as a process of the same user that is not an
// engine would: it dials a plugin's socket, says hello and asks for
// regions.
type shmClient struct {
	t *testing.T
	c *net.UnixConn
}

func dialSHM(t *testing.T, e *host.Engine) *shmClient {
	t.Helper()
	var ep struct{ Socket string }
	if err := json.Unmarshal(host.PluginEndpoint(e, "shm"), &ep); err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("unixpacket", ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	sc := &shmClient{t: t, c: nc.(*net.UnixConn)}
	sc.send(1, 0, e.Incarnation(), e.Name())
	if typ, st, _, _, fd := sc.recv(); typ != 2 || st != 0 || fd >= 0 {
		t.Fatalf("hello: type %d status %d fd %d", typ, st, fd)
	}
	return sc
}

func (sc *shmClient) send(typ uint8, region uint32, inc uint64, name string) {
	if err := sc.trySend(typ, region, inc, name); err != nil {
		sc.t.Fatal(err)
	}
}

func (sc *shmClient) trySend(typ uint8, region uint32, inc uint64, name string) error {
	b := make([]byte, 48, 48+len(name))
	binary.LittleEndian.PutUint32(b[0:], 0x4d485346)
	b[4], b[5], b[7] = 1, typ, uint8(len(name))
	binary.LittleEndian.PutUint32(b[12:], region)
	binary.LittleEndian.PutUint64(b[24:], inc)
	_, err := sc.c.Write(append(b, name...))
	return err
}

// recv reads one message: its type, status, offset and length, and the fd
// it carried (-1: none).
func (sc *shmClient) recv() (typ uint8, status int32, off, length uint64, fd int) {
	b, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(16))
	n, oobn, _, _, err := sc.c.ReadMsgUnix(b, oob)
	if err != nil || n < 48 {
		sc.t.Fatalf("read from the shm plugin: %d bytes, %v", n, err)
	}
	fd = -1
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			sc.t.Fatalf("control message: %v", err)
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			sc.t.Fatalf("rights: %v %v", fds, err)
		}
		fd = fds[0]
		sc.t.Cleanup(func() { unix.Close(fd) })
	}
	return b[5], int32(binary.LittleEndian.Uint32(b[8:])), binary.LittleEndian.Uint64(b[32:]), binary.LittleEndian.Uint64(b[40:]), fd
}

// query asks for region id and returns the status and the fd (-1: none)
// with the offset and length the answer gave.
func (sc *shmClient) query(id uint32) (status int32, fd int, off, length uint64) {
	sc.send(3, id, 0, "")
	typ, st, off, length, fd := sc.recv()
	if typ != 4 {
		sc.t.Fatalf("answer to a query: type %d", typ)
	}
	return st, fd, off, length
}

// TestSHMNonEngineClientGetsExactlyTheRegion: a process of the same user
// that is not an engine dials an engine's shm plugin and asks for every
// region. It gets nothing for the local-only one and for ids never
// registered; for the remote-read one a read-only descriptor of a file
// that holds exactly the region's bytes (it cannot map it writable); for
// the remote-read-write one a file of exactly its bytes, whose writes the
// owner sees. The rest of the allocation (local-only and unregistered
// bytes) is in none of the files it received.
func TestSHMNonEngineClientGetsExactlyTheRegion(t *testing.T) {
	ctx := context.Background()
	// Without a cluster secret, as the engine's warning says: any process
	// of the user may connect (with one it must prove it knows it first).
	e := blobEngine(t, "shm-exact", "")
	const alloc, block = 4 << 20, 64 << 10
	mem, err := e.Allocate(alloc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range mem {
		mem[i] = byte(i>>16) ^ byte(i)
	}
	want := bytes.Clone(mem)
	regions := []struct {
		off  int
		perm host.Perm
	}{{0, host.LocalOnly}, {block, host.RemoteRead}, {2 * block, host.RemoteReadWrite}}
	for _, r := range regions {
		if _, err := e.Register(ctx, mem[r.off:r.off+block], r.perm); err != nil {
			t.Fatal(err)
		}
	}
	// Not page-aligned in its allocation: it cannot be carved, so its
	// memfd would carry the bytes around it; shm shares none of it.
	const odd = 3*block + 100
	if _, err := e.Register(ctx, mem[odd:odd+block], host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, want) {
		t.Fatal("registering changed the application's bytes")
	}
	ids := map[int]uint32{}
	for _, b := range host.LocalBuffers(e) {
		ids[int(b.Base-uint64(localAddr(mem)))] = b.Region
	}
	sc := dialSHM(t, e)

	if st, fd, _, _ := sc.query(ids[0]); st == 0 || fd >= 0 {
		t.Fatalf("local-only region: status %d fd %d; want a refusal and no fd", st, fd)
	}
	if st, fd, _, _ := sc.query(ids[odd]); st != 11 || fd >= 0 { // ring.StatusUnsupported
		t.Fatalf("region not page-aligned in its allocation: status %d fd %d; want unsupported (11) and no fd", st, fd)
	}
	if st, fd, _, _ := sc.query(999); st == 0 || fd >= 0 {
		t.Fatalf("unregistered region id: status %d fd %d; want a refusal and no fd", st, fd)
	}

	// Remote-read: a read-only fd of exactly the region.
	st, fd, off, n := sc.query(ids[block])
	if st != 0 || fd < 0 || off != 0 || n != block {
		t.Fatalf("remote-read region: status %d fd %d offset %d length %d", st, fd, off, n)
	}
	exactly(t, "remote-read region", fd, want[block:2*block])
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE != unix.O_RDONLY {
		t.Fatalf("remote-read region's fd is open with flags %#x (%v), want O_RDONLY", fl, err)
	}
	if m, err := unix.Mmap(fd, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		unix.Munmap(m)
		t.Fatal("the remote-read region's fd maps writable and shared")
	}
	if _, err := unix.Pwrite(fd, []byte{1}, 0); err == nil {
		t.Fatal("the remote-read region's fd takes a write")
	}

	// Remote-read-write: exactly the region, writable; the owner sees it.
	st, fd, off, n = sc.query(ids[2*block])
	if st != 0 || fd < 0 || off != 0 || n != block {
		t.Fatalf("remote-read-write region: status %d fd %d offset %d length %d", st, fd, off, n)
	}
	exactly(t, "remote-read-write region", fd, want[2*block:3*block])
	m, err := unix.Mmap(fd, 0, block, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	m[10] ^= 0xff
	if mem[2*block+10] != m[10] {
		t.Fatal("a write into the remote-read-write region is not seen by its owner")
	}
	mem[2*block+10] = want[2*block+10]
	// Nothing else of the allocation changed.
	if !bytes.Equal(mem, want) {
		t.Fatal("the allocation changed outside what the client was allowed to write")
	}
}

// exactly checks that fd is a file of exactly the bytes want.
func exactly(t *testing.T, what string, fd int, want []byte) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != int64(len(want)) {
		t.Fatalf("%s: the file received is %d bytes, the region %d: it reaches memory that was not registered", what, st.Size, len(want))
	}
	got := make([]byte, len(want))
	if _, err := unix.Pread(fd, got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s: the file received does not hold the region's bytes (%v)", what, err)
	}
}

// BenchmarkRegisterCarved registers 64 KiB blocks of one allocation
// with a real engine and its plugins (tcp, shm): remote-read-write blocks
// are carved into their own memfds, local-only ones are not. Run with
// -benchtime=10000x for a KV pool of 10,000 blocks; the Free at the end
// (which puts carved blocks back) is reported as free-ms.
func BenchmarkRegisterCarved(b *testing.B) {
	for _, perm := range []host.Perm{host.LocalOnly, host.RemoteReadWrite} {
		b.Run(perm.String(), func(b *testing.B) {
			ctx := context.Background()
			cfg := joinConfig("bench-carve", "")
			cfg.Metastore.Kind = "none"
			e, err := host.New(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			const block = 64 << 10
			mem, err := e.Allocate(b.N * block)
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(block)
			b.ResetTimer()
			for i := range b.N {
				if _, err := e.Register(ctx, mem[i*block:(i+1)*block], perm); err != nil {
					b.Fatalf("block %d: %v", i, err)
				}
			}
			b.StopTimer()
			start := time.Now()
			if err := e.Free(mem); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds()), "free-ms")
		})
	}
}

func localAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// TestSHMNonEngineClientWithoutTheSecretGetsNothing: with a cluster
// secret in the shm plugin's config, a process of the same user that does
// not know it is refused at its hello and gets no descriptor at all.
func TestSHMNonEngineClientWithoutTheSecretGetsNothing(t *testing.T) {
	ctx := context.Background()
	e := hclEngine(t, ctx, fmt.Sprintf(`name = "shm-secret"
plugin_dir = %q
plugin "shm" {
  config {
    cluster_secret = "0123456789abcdef0123"
  }
}
`, binDir), "shm-secret.hcl")
	refusesWithoutSecret(t, ctx, e)
}

// TestSHMTakesTheEngineSecret: an engine whose only secret is its
// top-level cluster_secret_file hands it to the shm plugin (StartConfig),
// whose block names none: a client without the secret gets nothing.
func TestSHMTakesTheEngineSecret(t *testing.T) {
	ctx := context.Background()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("engine-wide-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := hclEngine(t, ctx, fmt.Sprintf(`name = "shm-engine-secret"
plugin_dir = %q
cluster_secret_file = %q
plugin "shm" {}
`, binDir, secret), "shm-engine-secret.hcl")
	refusesWithoutSecret(t, ctx, e)
}

// refusesWithoutSecret registers a remotely writable buffer on e and
// checks that a client that cannot prove the secret is refused at its
// hello, with no fd, and gets nothing after.
func refusesWithoutSecret(t *testing.T, ctx context.Context, e *host.Engine) {
	t.Helper()
	mem, err := e.Allocate(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Register(ctx, mem, host.RemoteReadWrite); err != nil {
		t.Fatal(err)
	}
	var ep struct{ Socket string }
	if err := json.Unmarshal(host.PluginEndpoint(e, "shm"), &ep); err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("unixpacket", ep.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sc := &shmClient{t: t, c: nc.(*net.UnixConn)}
	sc.send(1, 0, e.Incarnation(), e.Name())
	typ, st, _, _, fd := sc.recv()
	if typ != 2 || st != 4 || fd >= 0 { // hello ack, ring.StatusPermission
		t.Fatalf("hello without the secret: type %d status %d fd %d; want a refusal (status 4) and no fd", typ, st, fd)
	}
	// The plugin hung up: a query after the refusal gets nothing either.
	_ = sc.trySend(3, host.LocalBuffers(e)[0].Region, 0, "") // may fail: the plugin hung up
	b, oob := make([]byte, 512), make([]byte, unix.CmsgSpace(16))
	if n, oobn, _, _, err := sc.c.ReadMsgUnix(b, oob); err == nil && (n > 0 || oobn > 0) {
		t.Fatalf("after the refusal the plugin sent %d bytes and %d of control data", n, oobn)
	}
}
