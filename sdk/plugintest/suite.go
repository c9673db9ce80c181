package plugintest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Config says which plugin to test and how to configure its two instances.
type Config struct {
	// Binary is the plugin executable.
	Binary string
	// ConfigA and ConfigB are the HCL config bodies of the initiator and
	// the target instance (for TCP: listen addresses).
	ConfigA, ConfigB []byte
	// RegionSize is the size of each test region; default 8 MiB, raised
	// to hold a descriptor of the plugin's preferred slice and one byte
	// over its MaxSlice, up to 64 MiB.
	RegionSize int
	// Wait bounds how long the suite waits for one completion, for a
	// control call that ends work (Stop, Drain), and for outstanding work
	// to drain between cases; default 30s.
	Wait time.Duration
	// Only, when set, runs the cases whose name it accepts (and Start,
	// which launches the plugin) and leaves out the others.
	Only func(name string) bool
}

// Sane bounds of declared limits: a MaxSlice outside them is a
// declaration the host cannot plan with.
const (
	MinMaxSlice = 4 << 10
	MaxMaxSlice = 1 << 40
)

// Region ids and incarnations the suite uses.
const (
	incA, incB  = 0x1111, 0x2222
	regLocal    = 1 // on A: the initiator's memory
	regRW       = 1 // on B: remote read-write
	regRO       = 2 // on B: remote read-only
	regPriv     = 3 // on B: local only
	regKind     = 4 // on A and B: a region of a declared memory kind
	peerB       = 1 // B as A sees it
	peerBStale  = 2 // B under an incarnation it no longer has
	peerUnknown = 99
)

var tokens atomic.Uint64

func token() uint64 { return tokens.Add(1) }

// Summary is what RunWith learnt of the plugin.
type Summary struct {
	pluginclient.Description
	Rails []sdk.Rail
}

// Run runs the conformance suite against c.Binary, each case a subtest.
func Run(t *testing.T, c Config) { RunWith(Testing(t), c) }

// RunWith runs the conformance suite against c.Binary, each case through
// r.Run: the cases the plugin's declarations call for run, the others
// skip and say why. A case that fails fails alone: what it left
// outstanding is drained, and a plugin it killed, hung or confused is
// replaced by a fresh pair before the next case.
func RunWith(r Reporter, c Config) Summary {
	s := &suite{c: c, wait: c.Wait}
	if s.wait <= 0 {
		s.wait = completionWait
	}
	defer func() {
		if s.fx != nil {
			for _, p := range s.fx.close(false) {
				r.Errorf("%s", p)
			}
		}
	}()
	for _, k := range cases {
		if c.Only != nil && k.name != "Start" && !c.Only(k.name) {
			continue
		}
		r.Run(k.name, func(t Reporter) {
			if s.startFailed != "" && k.name != "Start" {
				t.Skipf("%s", s.startFailed)
			}
			if k.name != "Start" && k.need != nil {
				if why := k.need(s); why != "" {
					t.Skipf("%s", why)
				}
			}
			if k.name == "Start" {
				// Start fails or skips the rest with it.
				s.startFailed = "the plugin did not start (see Start)"
				defer func() {
					if !t.Failed() && s.fx != nil {
						s.startFailed = ""
					}
				}()
			}
			fx := s.pair(t)
			defer s.after(t, fx, k)
			k.run(t, s, fx)
		})
	}
	return s.summary
}

// suite is one run of the cases against a plugin: what it declared and
// the pair of instances the next case uses.
type suite struct {
	c           Config
	wait        time.Duration
	summary     Summary
	size        int
	fx          *fixture
	startFailed string
	run         uint64 // the next StartConfig.Run of an initiator
}

// fixture is an initiator A and a target B with the suite's regions and
// peers.
type fixture struct {
	a, b                *Instance
	local, rw, ro, priv []byte
}

// testCase is one case of the suite.
type testCase struct {
	name string
	// need says why the case does not apply to this plugin ("": it does).
	need func(s *suite) string
	run  func(t Reporter, s *suite, fx *fixture)
	// spends: the case ends the pair's usefulness (stops, drains, kills
	// or fences it); the next case gets a new one.
	spends bool
	// kills: the case kills a plugin on purpose; its death is no failure.
	kills bool
}

// cases are the suite's cases in the order they run.
var cases = []testCase{
	{name: "Start", run: func(t Reporter, s *suite, fx *fixture) {
		t.Logf("%s %s, protocol %d, interfaces %v", s.summary.Name, s.summary.Version, s.summary.Protocol, s.summary.Interfaces)
	}},
	{name: "Declarations", run: declarations},
	{name: "RoundTrips", run: roundTrips},
	{name: "SliceLimits", need: needMaxSlice, run: sliceLimits},
	{name: "Concurrent", run: concurrent},
	{name: "Rejections", run: rejections},
	{name: "Nop", run: func(t Reporter, s *suite, fx *fixture) {
		if c := fx.a.do(t, ring.Descriptor{Token: token(), Op: ring.OpNop}); c.Status != ring.StatusOK {
			t.Fatalf("nop completed %v", c.Status)
		}
	}},
	{name: "MemoryKinds", need: needKinds, run: memoryKinds},
	{name: "Rails", need: needRails, run: rails},
	{name: "TwoLanes", run: twoLanes},
	{name: "Deadlines", run: deadlines},
	{name: "BatchRegistration", run: func(t Reporter, s *suite, fx *fixture) { batchRegistration(t, fx.a, fx.b, fx.local) }},
	{name: "Unregister", run: unregister},
	{name: "UnregisterInFlight", run: unregisterInFlight, spends: true},
	{name: "Abort", need: needIface(sdk.InterfaceAborter, "Aborter"), run: abort},
	{name: "Drain", need: needIface(sdk.InterfaceDrainer, "Drainer"), run: drain, spends: true},
	{name: "Fence", need: needIface(sdk.InterfaceFencer, "Fencer"), run: fence, spends: true},
	{name: "StopInFlight", run: stopInFlight, spends: true},
	{name: "PeerDeath", run: peerDeath, spends: true, kills: true},
}

// CaseNames lists the suite's cases in the order they run.
func CaseNames() []string {
	var n []string
	for _, k := range cases {
		n = append(n, k.name)
	}
	return n
}

func needIface(iface, name string) func(*suite) string {
	return func(s *suite) string {
		if s.summary.Implements(iface) {
			return ""
		}
		return fmt.Sprintf("optional: the plugin does not implement sdk.%s", name)
	}
}

// pair returns the fixture, launching one if the last case spent or
// broke it.
func (s *suite) pair(t Reporter) *fixture {
	t.Helper()
	if s.fx != nil {
		return s.fx
	}
	s.run++
	o := launchOptions{wait: s.wait, owned: true}
	fx := &fixture{}
	ok := false
	defer func() {
		if !ok { // a Fatalf on the way: stop what was started
			fx.close(true)
		}
	}()
	oa := o
	oa.run = 0xc0f0<<16 | s.run
	fx.a = launch(t, s.c.Binary, "conformance-a", incA, s.c.ConfigA, oa)
	fx.b = launch(t, s.c.Binary, "conformance-b", incB, s.c.ConfigB, o)
	if s.summary.Name == "" {
		// After Start: a plugin reports its configured limits then.
		ctx, cancel := context.WithTimeout(context.Background(), s.wait)
		d, err := fx.a.proc.Client.Describe(ctx)
		cancel()
		if err != nil {
			t.Fatalf("describe: %v%s", err, fx.a.Died())
		}
		ctx, cancel = context.WithTimeout(context.Background(), s.wait)
		pr, err := fx.a.proc.Client.Probe(ctx)
		cancel()
		if err != nil {
			t.Fatalf("probe after start: %v%s", err, fx.a.Died())
		}
		s.summary = Summary{Description: d, Rails: pr.Rails}
		s.size = s.regionSize()
	}
	fx.local = fx.a.region(t, regLocal, s.size, sdk.PermLocal, sdk.MemoryCPU)
	fx.rw = fx.b.region(t, regRW, s.size, sdk.PermRemoteReadWrite, sdk.MemoryCPU)
	fx.ro = fx.b.region(t, regRO, 1<<16, sdk.PermRemoteRead, sdk.MemoryCPU)
	fx.priv = fx.b.region(t, regPriv, 1<<16, sdk.PermLocal, sdk.MemoryCPU)
	fill(fx.rw, 1)
	fill(fx.ro, 2)
	fill(fx.priv, 3)
	fx.a.openPeer(t, peerB, fx.b, incB)
	fx.a.openPeer(t, peerBStale, fx.b, incB+1)
	ok = true
	s.fx = fx
	return fx
}

// regionSize is the size of the big regions: Config.RegionSize, or 8 MiB
// raised to hold the declared slices (up to 64 MiB).
func (s *suite) regionSize() int {
	if s.c.RegionSize > 0 {
		return s.c.RegionSize
	}
	size := uint64(8 << 20)
	const most = 64<<20 + 4096
	if p := s.summary.PreferredSlice; p > size {
		size = min(p, most)
	}
	if m := s.summary.MaxSlice; m >= MinMaxSlice && m+4096 > size && m <= MaxMaxSlice {
		size = min(m+4096, most)
	}
	return int(size)
}

// after ends a case: what it left outstanding drains, broken completions
// and a dead plugin are reported, and a pair the case spent or that
// failed is replaced for the next one.
func (s *suite) after(t Reporter, fx *fixture, k testCase) {
	if fx != s.fx {
		return
	}
	wait := s.wait
	if t.Failed() {
		wait = time.Second // the pair is replaced anyway
	}
	for _, in := range []*Instance{fx.a, fx.b} {
		if left := in.Drain(wait); len(left) > 0 && !in.Gone() && !t.Failed() {
			t.Errorf("%s: %d descriptors still outstanding %v after the case (first token %#x)", in.name, len(left), s.wait, left[0])
		}
		if p := in.Problems(); len(p) > 0 && !t.Failed() {
			t.Errorf("%s", Summarize(p))
		}
		if !k.kills && !t.Failed() {
			if d := in.Died(); d != "" {
				t.Errorf("%s", strings.TrimPrefix(d, "\n"))
			}
		}
	}
	if !k.spends && !t.Failed() {
		return
	}
	for _, p := range fx.close(t.Failed()) {
		t.Errorf("%s", p)
	}
	s.fx = nil
}

// close stops both instances; kill: without asking them to stop (they
// failed, and may not answer).
func (fx *fixture) close(kill bool) []string {
	var out []string
	for _, in := range []*Instance{fx.a, fx.b} {
		if in == nil {
			continue
		}
		if kill {
			in.noStop = true
		}
		out = append(out, in.close()...)
	}
	return out
}

func declarations(t Reporter, s *suite, fx *fixture) {
	d := s.summary
	switch m := d.MaxSlice; {
	case m > MaxMaxSlice:
		t.Errorf("MaxSlice = %d is above the sane bound of %d (1 TiB): a limit the host cannot plan with (0 means no limit)", m, uint64(MaxMaxSlice))
	case m > 0 && m < MinMaxSlice:
		t.Errorf("MaxSlice = %d is below the sane bound of %d (4 KiB)", m, MinMaxSlice)
	}
	switch p := d.PreferredSlice; {
	case p > MaxMaxSlice:
		t.Errorf("PreferredSlice = %d is above the sane bound of %d (1 TiB)", p, uint64(MaxMaxSlice))
	case p > 0 && p < MinMaxSlice:
		t.Errorf("PreferredSlice = %d is below the sane bound of %d (4 KiB)", p, MinMaxSlice)
	case p > 0 && d.MaxSlice > 0 && p > d.MaxSlice:
		t.Errorf("PreferredSlice = %d is above MaxSlice = %d", p, d.MaxSlice)
	}
	for _, op := range d.Ops {
		if op != ring.OpWrite && op != ring.OpRead && op != ring.OpNop {
			t.Errorf("Ops lists %v, which is no descriptor op", op)
		}
	}
	if !d.Carries(ring.OpWrite) && !d.Carries(ring.OpRead) {
		t.Errorf("Ops %v carries neither writes nor reads", d.Ops)
	}
	for _, k := range d.MemoryKinds {
		if !slices.Contains([]sdk.MemoryKind{sdk.MemoryCPU, sdk.MemoryCUDA, sdk.MemoryROCm, sdk.MemoryFile}, k) {
			t.Errorf("MemoryKinds lists %q, which is no memory kind the host knows", k)
		}
	}
	if d.ForeignLocalOnly && !d.ForeignMemory {
		t.Errorf("ForeignLocalOnly without ForeignMemory")
	}
	t.Logf("ops %v, max slice %d, preferred slice %d, memory kinds %v, %d rails, two-sided %v", d.Ops, d.MaxSlice, d.PreferredSlice, d.MemoryKinds, len(s.summary.Rails), d.TwoSided)
}

// limit is the longest descriptor the suite sends: MaxSlice where it is
// declared and sane, and the region's size.
func (s *suite) limit() uint64 {
	l := uint64(s.size)
	if m := s.summary.MaxSlice; m >= MinMaxSlice && m < l {
		l = m
	}
	return l
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed))
	for i := 0; i+8 <= len(b); i += 8 {
		v := r.Uint64()
		for k := range 8 {
			b[i+k] = byte(v >> (8 * k))
		}
	}
}

func roundTrips(t Reporter, s *suite, fx *fixture) {
	a, local, rw := fx.a, fx.local, fx.rw
	sizes := []uint64{1, 3, 63, 4096, 4099, 65537, 1<<20 + 3, 4 << 20}
	for _, n := range []uint64{s.summary.PreferredSlice, s.summary.MaxSlice} {
		if n > 0 && !slices.Contains(sizes, n) {
			sizes = append(sizes, n)
		}
	}
	slices.Sort(sizes)
	write, read := s.summary.Carries(ring.OpWrite), s.summary.Carries(ring.OpRead)
	offsets := []int{0, 1, 4095}
	for _, size := range sizes {
		if size > s.limit() {
			t.Logf("%d bytes: above the limit %d (MaxSlice or the region), not sent", size, s.limit())
			continue
		}
		n := int(size)
		for _, off := range offsets {
			if off+n > len(rw) || off+n > len(local) {
				continue
			}
			loff := (off * 7) % 8192
			if loff+n > len(local) {
				loff = 0
			}
			if write {
				fill(local[loff:loff+n], uint64(n+off))
				c := a.do(t, ring.Descriptor{Token: token(), Op: ring.OpWrite, LocalRegion: regLocal, LocalOffset: uint64(loff), Peer: peerB, RemoteRegion: regRW, RemoteOffset: uint64(off), Length: uint64(n)})
				if c.Status != ring.StatusOK || c.Length != uint64(n) {
					t.Fatalf("write %d bytes at %d: %v, %d bytes", n, off, c.Status, c.Length)
				}
				if !bytes.Equal(rw[off:off+n], local[loff:loff+n]) {
					t.Fatalf("write %d bytes at %d: target bytes differ", n, off)
				}
			}
			if read {
				fill(rw[off:off+n], uint64(3*n+off))
				c := a.do(t, ring.Descriptor{Token: token(), Op: ring.OpRead, LocalRegion: regLocal, LocalOffset: uint64(loff), Peer: peerB, RemoteRegion: regRW, RemoteOffset: uint64(off), Length: uint64(n)})
				if c.Status != ring.StatusOK || c.Length != uint64(n) {
					t.Fatalf("read %d bytes at %d: %v, %d bytes", n, off, c.Status, c.Length)
				}
				if !bytes.Equal(rw[off:off+n], local[loff:loff+n]) {
					t.Fatalf("read %d bytes at %d: local bytes differ", n, off)
				}
			}
		}
	}
}

func needMaxSlice(s *suite) string {
	m := s.summary.MaxSlice
	switch {
	case m == 0:
		return "the plugin declares no MaxSlice"
	case m < MinMaxSlice || m > MaxMaxSlice:
		return fmt.Sprintf("MaxSlice = %d is out of bounds (see Declarations)", m)
	case m+1 > uint64(s.size):
		return fmt.Sprintf("MaxSlice = %d: one byte over it does not fit the %d-byte test region", m, s.size)
	}
	return ""
}

// sliceLimits: a descriptor of MaxSlice bytes is carried, one of one
// byte more completes StatusInvalid, as Info.MaxSlice promises.
func sliceLimits(t Reporter, s *suite, fx *fixture) {
	m := s.summary.MaxSlice
	op := ring.OpWrite
	if !s.summary.Carries(op) {
		op = ring.OpRead
	}
	if c := fx.a.do(t, ring.Descriptor{Token: token(), Op: op, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: m}); c.Status != ring.StatusOK || c.Length != m {
		t.Errorf("%v of MaxSlice = %d bytes: %v, %d bytes", op, m, c.Status, c.Length)
	}
	before := sha256.Sum256(fx.rw)
	fill(fx.local[:m+1], 77)
	c := fx.a.do(t, ring.Descriptor{Token: token(), Op: op, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: m + 1})
	if c.Status != ring.StatusInvalid {
		t.Errorf("%v of MaxSlice+1 = %d bytes: %v, want %v (Info.MaxSlice: a longer descriptor completes StatusInvalid)", op, m+1, c.Status, ring.StatusInvalid)
	}
	if op == ring.OpWrite && c.Status != ring.StatusOK && sha256.Sum256(fx.rw) != before {
		t.Errorf("a refused write of MaxSlice+1 bytes changed the target's memory")
	}
}

func concurrent(t Reporter, s *suite, fx *fixture) {
	a, local, rw := fx.a, fx.local, fx.rw
	const n, size = 512, 4099
	if n*size > len(rw) {
		t.Skipf("region too small")
	}
	fill(local[:n*size], 99)
	var ds []ring.Descriptor
	for i := range n {
		op := s.op(i)
		off := uint64(i * size)
		ds = append(ds, ring.Descriptor{Token: token(), Op: op, LocalRegion: regLocal, LocalOffset: off, Peer: peerB, RemoteRegion: regRW, RemoteOffset: off, Length: size})
	}
	chs := a.Submit(ds...)
	for i, ch := range chs {
		c := a.waitFor(t, ch, ds[i].Token)
		if c.Status != ring.StatusOK || c.Length != size {
			t.Fatalf("descriptor %d: %v, %d bytes", i, c.Status, c.Length)
		}
	}
	for i := range n {
		off := i * size
		if !bytes.Equal(local[off:off+size], rw[off:off+size]) {
			t.Fatalf("descriptor %d: bytes differ between the two sides", i)
		}
	}
}

// op returns the i-th op of a mix of the ops the plugin carries: writes
// and reads alternating where it carries both.
func (s *suite) op(i int) ring.Op {
	w, r := s.summary.Carries(ring.OpWrite), s.summary.Carries(ring.OpRead)
	if w && (!r || i%2 == 0) {
		return ring.OpWrite
	}
	return ring.OpRead
}

func rejections(t Reporter, s *suite, fx *fixture) {
	a, local, rw, ro, priv := fx.a, fx.local, fx.rw, fx.ro, fx.priv
	big := uint64(len(rw))
	cases := []struct {
		name string
		d    ring.Descriptor
		want []ring.Status
	}{
		{"unknown remote region", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: 77, Length: 10}, []ring.Status{ring.StatusNotRegistered}},
		{"remote out of bounds", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, RemoteOffset: big - 5, Length: 10}, []ring.Status{ring.StatusOutOfBounds}},
		{"remote read out of bounds", ring.Descriptor{Op: ring.OpRead, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, RemoteOffset: big, Length: 1}, []ring.Status{ring.StatusOutOfBounds}},
		{"remote overflow", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, RemoteOffset: ^uint64(0) - 4, Length: 10}, []ring.Status{ring.StatusInvalid, ring.StatusOutOfBounds}},
		{"write to read-only", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRO, Length: 100}, []ring.Status{ring.StatusPermission}},
		{"read local-only", ring.Descriptor{Op: ring.OpRead, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regPriv, Length: 100}, []ring.Status{ring.StatusPermission}},
		{"write local-only", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regPriv, Length: 100}, []ring.Status{ring.StatusPermission}},
		{"stale incarnation", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerBStale, RemoteRegion: regRW, Length: 100}, []ring.Status{ring.StatusStaleIncarnation}},
		{"unknown peer", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerUnknown, RemoteRegion: regRW, Length: 100}, []ring.Status{ring.StatusPeerUnknown}},
		{"local not registered", ring.Descriptor{Op: ring.OpWrite, LocalRegion: 55, Peer: peerB, RemoteRegion: regRW, Length: 100}, []ring.Status{ring.StatusNotRegistered}},
		{"local out of bounds", ring.Descriptor{Op: ring.OpRead, LocalRegion: regLocal, LocalOffset: uint64(len(local)) - 1, Peer: peerB, RemoteRegion: regRW, Length: 100}, []ring.Status{ring.StatusOutOfBounds}},
		{"zero length", ring.Descriptor{Op: ring.OpWrite, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW}, []ring.Status{ring.StatusInvalid}},
		{"unknown op", ring.Descriptor{Op: 42, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRW, Length: 10}, []ring.Status{ring.StatusInvalid}},
	}
	sums := func() [3][32]byte {
		return [3][32]byte{sha256.Sum256(rw), sha256.Sum256(ro), sha256.Sum256(priv)}
	}
	before := sums()
	localBefore := sha256.Sum256(local)
	for _, c := range cases {
		t.Run(c.name, func(t Reporter) {
			if c.d.Op == ring.OpWrite || c.d.Op == ring.OpRead {
				if !s.summary.Carries(c.d.Op) {
					t.Skipf("the plugin does not carry %v", c.d.Op)
				}
			}
			c.d.Token = token()
			got := a.do(t, c.d)
			if !slices.Contains(c.want, got.Status) {
				t.Fatalf("status %v, want one of %v", got.Status, c.want)
			}
			if got.Token != c.d.Token {
				t.Fatalf("completion token %#x, want %#x", got.Token, c.d.Token)
			}
		})
	}
	if sums() != before {
		t.Fatalf("a rejected request changed the target's memory")
	}
	if sha256.Sum256(local) != localBefore {
		t.Fatalf("a rejected request changed the initiator's memory")
	}
	// The plugin still serves good requests after all that.
	if s.summary.Carries(ring.OpRead) {
		c := a.do(t, ring.Descriptor{Token: token(), Op: ring.OpRead, LocalRegion: regLocal, Peer: peerB, RemoteRegion: regRO, Length: 100})
		if c.Status != ring.StatusOK || !bytes.Equal(local[:100], ro[:100]) {
			t.Fatalf("read after rejections: %v", c.Status)
		}
	}
}

func unregister(t Reporter, s *suite, fx *fixture) {
	ctx := context.Background()
	if err := fx.b.proc.Client.UnregisterMemory(ctx, regPriv); err != nil {
		t.Fatalf("unregister: %v", err)
	}
	c := fx.a.do(t, ring.Descriptor{Token: token(), Op: s.op(0), LocalRegion: regLocal, Peer: peerB, RemoteRegion: regPriv, Length: 10})
	if c.Status != ring.StatusNotRegistered {
		t.Errorf("%v of an unregistered remote region: %v, want %v", s.op(0), c.Status, ring.StatusNotRegistered)
	}
	if err := fx.b.proc.Client.UnregisterMemory(ctx, regPriv); err == nil {
		t.Errorf("unregistering twice succeeded")
	}
	// Put it back for the cases after this one.
	fx.priv = fx.b.region(t, regPriv, 1<<16, sdk.PermLocal, sdk.MemoryCPU)
}
