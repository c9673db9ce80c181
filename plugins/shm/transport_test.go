package shm_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/plugins/shm"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

func TestDescribeProbe(t *testing.T) {
	tr := shm.New(shm.WithLogger(hclog.NewNullLogger()))
	info, err := tr.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "shm" || !info.SameMachineOnly || len(info.MemoryKinds) != 1 || info.MemoryKinds[0] != "cpu" {
		t.Fatalf("describe: %+v", info)
	}
	pr, err := tr.Probe(t.Context())
	if err != nil || !pr.Available {
		t.Fatalf("probe: %+v, %v", pr, err)
	}
	if err := tr.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func TestRoundTrip(t *testing.T) {
	a, local, rw := writePair(t, "", 16<<20)
	for _, n := range []int{1, 4099, 1 << 20, 1<<20 + 1, 5<<20 + 3, 16 << 20} {
		fill(local[:n], uint64(n))
		c := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: uint64(n)})
		if c.Status != ring.StatusOK || c.N != uint64(n) {
			t.Fatalf("write %d: %v %d", n, c.Status, c.N)
		}
		plugintest.MustEqual(t, fmt.Sprintf("write %d", n), rw[:n], local[:n])
		fill(rw[:n], uint64(n)+7)
		c = a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: uint64(n)})
		if c.Status != ring.StatusOK || c.N != uint64(n) {
			t.Fatalf("read %d: %v %d", n, c.Status, c.N)
		}
		plugintest.MustEqual(t, fmt.Sprintf("read %d", n), local[:n], rw[:n])
	}
	st := a.stats(t)
	if st["maps_created"] != 1 || st["queries"] != 1 {
		t.Fatalf("the region was mapped %d times after %d queries, want once", st["maps_created"], st["queries"])
	}
}

// A remote-read region is mapped read-only: the plugin refuses a write
// before it touches memory, and the kernel would refuse it too.
func TestReadOnlyRegionMappedReadOnly(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	b := startEngine(t, "b", 2, "")
	local := a.region(t, 1, 1<<20, sdk.PermLocal, "a-local")
	label := fmt.Sprintf("ferry-ro-%d", os.Getpid())
	ro := b.region(t, 7, 1<<20, sdk.PermRemoteRead, label)
	fill(ro, 5)
	a.open(t, 1, b)
	c := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 7, Length: 4096})
	if c.Status != ring.StatusOK {
		t.Fatalf("read of a read-only region: %v", c.Status)
	}
	plugintest.MustEqual(t, "read", local[:4096], ro[:4096])
	before := append([]byte(nil), ro...)
	fill(local, 9)
	c = a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 7, Length: 4096})
	if c.Status != ring.StatusPermission {
		t.Fatalf("write to a read-only region: %v, want %v", c.Status, ring.StatusPermission)
	}
	plugintest.MustEqual(t, "read-only region after a refused write", ro, before)

	// This process holds two mappings of the memfd: the owner's (rw-s)
	// and the peer plugin's (r--s, the one the transport copies from).
	perms := map[string]int{}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 6 && strings.HasPrefix(fields[5], "/memfd:"+label) {
			perms[fields[1]]++
		}
	}
	if perms["r--s"] != 1 || perms["rw-s"] != 1 {
		t.Fatalf("mappings of %s by permission: %v, want one r--s (peer) and one rw-s (owner)", label, perms)
	}
}

func TestRejections(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	b := startEngine(t, "b", 2, "")
	a.region(t, 1, 1<<20, sdk.PermLocal, "a-local")
	b.region(t, 1, 1<<20, sdk.PermRemoteReadWrite, "b-rw")
	b.region(t, 3, 1<<16, sdk.PermLocal, "b-priv")
	// A region registered without an fd cannot be shared.
	if err := b.tr.RegisterMemory(t.Context(), sdk.Region{ID: 4, Mem: make([]byte, 4096), Perm: sdk.PermRemoteReadWrite, FD: -1}); err != nil {
		t.Fatal(err)
	}
	a.open(t, 1, b)
	stale := *b
	stale.incarnation++
	a.open(t, 2, &stale)
	other := *b
	other.name = "not-b"
	a.open(t, 3, &other)
	cases := []struct {
		name string
		d    ring.Descriptor
		want ring.Status
	}{
		{"unknown remote region", ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 77, Length: 10}, ring.StatusNotRegistered},
		{"remote out of bounds", ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 1, RemoteOffset: 1<<20 - 5, Length: 10}, ring.StatusOutOfBounds},
		{"remote overflow", ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, RemoteOffset: ^uint64(0) - 4, Length: 10}, ring.StatusOutOfBounds},
		{"local-only", ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 3, Length: 10}, ring.StatusPermission},
		{"no fd", ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 4, Length: 10}, ring.StatusUnsupported},
		{"stale incarnation", ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 2, RemoteRegion: 1, Length: 10}, ring.StatusStaleIncarnation},
		{"other segment", ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 3, RemoteRegion: 1, Length: 10}, ring.StatusStaleIncarnation},
		{"unknown peer", ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 9, RemoteRegion: 1, Length: 10}, ring.StatusPeerUnknown},
		{"deadline passed", ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 10, Deadline: 1}, ring.StatusTimeout},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := a.do(t, c.d); got.Status != c.want {
				t.Fatalf("status %v, want %v", got.Status, c.want)
			}
		})
	}
}

func TestOpenPeerOtherMachineRefused(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	b := startEngine(t, "b", 2, "")
	err := a.tr.OpenPeer(t.Context(), sdk.Peer{ID: 1, Segment: "b", Incarnation: 2, MachineID: "elsewhere", Endpoint: b.ep})
	if err == nil || !strings.Contains(err.Error(), "same machine") {
		t.Fatalf("open peer on another machine: %v", err)
	}
	if err := a.tr.OpenPeer(t.Context(), sdk.Peer{ID: 1, Segment: "b", Endpoint: []byte(`{"v":9}`)}); err == nil {
		t.Fatal("an endpoint of an unknown version was accepted")
	}
}

// Unregistering a region that a peer mapped makes the peer unmap it before
// UnregisterMemory returns; the next use asks again and is refused.
func TestRevokeOnUnregister(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	b := startEngine(t, "b", 2, "")
	local := a.region(t, 1, 8<<20, sdk.PermLocal, "a-local")
	b.region(t, 5, 8<<20, sdk.PermRemoteReadWrite, "b-rw")
	a.open(t, 1, b)
	if c := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 5, Length: 100}); c.Status != ring.StatusOK {
		t.Fatal(c.Status)
	}
	if st := a.stats(t); st["maps_open"] != 1 {
		t.Fatalf("maps_open %d, want 1", st["maps_open"])
	}
	// A large copy racing with the revoke ends either way, exactly once.
	a.next++
	big := ring.Descriptor{Token: a.next, Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 5, Length: 8 << 20}
	a.tr.Submit(&big, a.col)
	if err := b.tr.UnregisterMemory(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	// The acknowledgement is sent after the unmap, so this holds now.
	st := a.stats(t)
	if st["maps_open"] != 0 || st["maps_dropped"] != 1 || st["revokes_recv"] != 1 {
		t.Fatalf("after unregister: maps_open %d maps_dropped %d revokes_recv %d", st["maps_open"], st["maps_dropped"], st["revokes_recv"])
	}
	if got := a.col.Wait(big.Token).Status; got != ring.StatusOK && got != ring.StatusNotRegistered {
		t.Fatalf("copy racing the revoke: %v", got)
	}
	if bs := b.stats(t); bs["revokes_sent"] != 1 || bs["revoke_timeouts"] != 0 {
		t.Fatalf("owner: revokes_sent %d revoke_timeouts %d", bs["revokes_sent"], bs["revoke_timeouts"])
	}
	if c := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 5, Length: 100}); c.Status != ring.StatusNotRegistered {
		t.Fatalf("write after unregister: %v, want %v", c.Status, ring.StatusNotRegistered)
	}
	// Registered again under the same id: a new generation, mapped anew.
	rw2 := b.region(t, 5, 1<<20, sdk.PermRemoteReadWrite, "b-rw2")
	fill(local[:100], 3)
	if c := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 5, Length: 100}); c.Status != ring.StatusOK {
		t.Fatalf("write after re-register: %v", c.Status)
	}
	plugintest.MustEqual(t, "re-registered region", rw2[:100], local[:100])
}

// ClosePeer unmaps the peer's regions; Stop completes what waits with
// StatusShutdown.
func TestClosePeerAndStop(t *testing.T) {
	a := startEngine(t, "a", 1, "")
	b := startEngine(t, "b", 2, "")
	a.region(t, 1, 1<<20, sdk.PermLocal, "a-local")
	b.region(t, 1, 1<<20, sdk.PermRemoteReadWrite, "b-rw")
	a.open(t, 1, b)
	if c := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 100}); c.Status != ring.StatusOK {
		t.Fatal(c.Status)
	}
	if err := a.tr.ClosePeer(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if st := a.stats(t); st["maps_open"] != 0 || st["maps_dropped"] != 1 {
		t.Fatalf("after close peer: %v", st)
	}
	if c := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 100}); c.Status != ring.StatusPeerUnknown {
		t.Fatalf("after close peer: %v", c.Status)
	}
	if err := a.tr.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if c := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 100}); c.Status != ring.StatusShutdown {
		t.Fatalf("after stop: %v", c.Status)
	}
}

// A 64 MiB copy is split over the workers: each of them runs a chunk.
func TestLargeCopyUsesSeveralWorkers(t *testing.T) {
	const size = 64 << 20
	a, local, rw := writePair(t, "copy_workers = 2", size)
	fill(local, 11)
	if c := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: size}); c.Status != ring.StatusOK || c.N != size {
		t.Fatalf("64 MiB write: %v %d", c.Status, c.N)
	}
	plugintest.MustEqual(t, "64 MiB write", rw, local)
	st := a.stats(t)
	if st["copies_split"] != 1 || st["worker0_chunks"] == 0 || st["worker1_chunks"] == 0 {
		t.Fatalf("copies_split %d, worker0_chunks %d, worker1_chunks %d: want one split copy over both workers",
			st["copies_split"], st["worker0_chunks"], st["worker1_chunks"])
	}
	// A small copy stays inline.
	if c := a.do(t, ring.Descriptor{Op: ring.OpWrite, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 4096}); c.Status != ring.StatusOK {
		t.Fatal(c.Status)
	}
	if st2 := a.stats(t); st2["copies_inline"] != st["copies_inline"]+1 {
		t.Fatalf("4 KiB copy was not inline: %v", st2)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []string{`copy_workers = 0`, `split_min = "1MiB"`, `inline_max = "lots"`, `revoke_timeout = "1ns"`, `bogus = 1`} {
		tr := shm.New(shm.WithLogger(hclog.NewNullLogger()))
		_, err := tr.Start(t.Context(), sdk.StartConfig{Engine: "x", MachineID: machine, Config: []byte(cfg), ConfigFile: "f.hcl", ConfigLine: 3, ConfigColumn: 1})
		if err == nil || !strings.Contains(err.Error(), "f.hcl:3:") {
			t.Errorf("config %q: %v", cfg, err)
		}
		tr.Stop(t.Context())
	}
}

// dialerHelper runs in a child process (as another user): it tries to read
// region 1 of the engine at endpoint ep and prints the status.
func dialerHelper(ep string) int {
	tr := shm.New(shm.WithLogger(hclog.NewNullLogger()))
	ctx := context.Background()
	defer tr.Stop(ctx)
	if _, err := tr.Start(ctx, sdk.StartConfig{Engine: "intruder", Incarnation: 9, MachineID: machine}); err != nil {
		fmt.Println("start:", err)
		return 2
	}
	if err := tr.RegisterMemory(ctx, sdk.Region{ID: 1, Mem: make([]byte, 4096), Perm: sdk.PermLocal, FD: -1}); err != nil {
		fmt.Println("register:", err)
		return 2
	}
	if err := tr.OpenPeer(ctx, sdk.Peer{ID: 1, Segment: "b", Incarnation: 2, MachineID: machine, Endpoint: sdk.Endpoint(ep)}); err != nil {
		fmt.Println("open peer:", err)
		return 2
	}
	done := make(chan ring.Status, 1)
	d := ring.Descriptor{Token: 1, Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 100}
	tr.Submit(&d, completeFunc(func(st ring.Status) { done <- st }))
	fmt.Printf("status=%d\n", <-done)
	return 0
}

type completeFunc func(ring.Status)

func (f completeFunc) Complete(_ uint64, st ring.Status, _ uint64) { f(st) }

// A plugin running as another user is refused by SO_PEERCRED.
func TestPeerCredRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to run the dialer as another user")
	}
	b := startEngine(t, "b", 2, "")
	b.region(t, 1, 1<<20, sdk.PermRemoteReadWrite, "b-rw")
	// The test binary must be reachable by nobody: copy it out of the
	// private build directory.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "dialer.test")
	copyFile(t, self, bin)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), helperEnv+"="+string(b.ep))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dialer as nobody: %v\n%s", err, out)
	}
	want := fmt.Sprintf("status=%d", ring.StatusPermission)
	if !strings.Contains(string(out), want) {
		t.Fatalf("dialer as nobody printed %q, want %q", out, want)
	}
	st := b.stats(t)
	if st["cred_rejected"] != 1 || st["queries_served"] != 0 {
		t.Fatalf("owner: cred_rejected %d queries_served %d", st["cred_rejected"], st["queries_served"])
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// A plugin killed with SIGKILL leaves nothing behind: no file in /dev/shm
// or the temporary directory, and its abstract socket is gone.
func TestSIGKILLLeavesNothing(t *testing.T) {
	bin := pluginBinary(t)
	devShm := listDir(t, "/dev/shm")
	tmp := listDir(t, os.TempDir())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, epb, socket, r := startVictim(t, ctx, bin, sdk.StartConfig{Engine: "victim", Incarnation: 3, MachineID: machine})
	if err := p.Client.RegisterMemory(ctx, 1, r.FD(), 0, 1<<20, sdk.PermRemoteReadWrite, "cpu"); err != nil {
		t.Fatal(err)
	}
	// A peer in this process maps the victim's region, so the plugin has
	// a served connection open when it dies.
	a := startEngine(t, "a", 1, "")
	a.region(t, 1, 1<<20, sdk.PermLocal, "a-local")
	a.open(t, 1, &engine{name: "victim", incarnation: 3, ep: epb})
	if c := a.do(t, ring.Descriptor{Op: ring.OpRead, LocalRegion: 1, Peer: 1, RemoteRegion: 1, Length: 4096}); c.Status != ring.StatusOK {
		t.Fatalf("read from the plugin's region: %v", c.Status)
	}
	if !abstractSocketListed(t, socket) {
		t.Fatalf("socket %s not in /proc/net/unix while the plugin runs", socket)
	}
	if err := syscall.Kill(p.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Exited()
	if abstractSocketListed(t, socket) {
		t.Fatalf("socket %s still listed after SIGKILL", socket)
	}
	if got := listDir(t, "/dev/shm"); !sameSet(got, devShm) {
		t.Fatalf("/dev/shm changed: %v, was %v", got, devShm)
	}
	for name := range listDir(t, os.TempDir()) {
		if !tmp[name] && strings.Contains(name, "ferry-shm") {
			t.Fatalf("%s left in %s", name, os.TempDir())
		}
	}
}

func listDir(t *testing.T, dir string) map[string]bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// abstractSocketListed reports whether a listening socket named name
// (abstract, "@...") exists in this network namespace.
func abstractSocketListed(t *testing.T, name string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && f[len(f)-1] == name {
			return true
		}
	}
	return false
}

// TestSettingsTable checks the table that declares the config block.
func TestSettingsTable(t *testing.T) {
	for _, p := range conf.Lint("shm", shm.Settings) {
		t.Error(p)
	}
}
