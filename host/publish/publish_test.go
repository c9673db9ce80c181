package publish

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// outageStore is a memory metastore whose leases fail Update while down
// is set, as one whose server is unreachable.
type outageStore struct {
	metastore.Backend
	down atomic.Bool
}

type outageLease struct {
	metastore.Lease
	s *outageStore
}

func (s *outageStore) PutLeased(ctx context.Context, key string, value []byte, ttl time.Duration) (metastore.Lease, error) {
	l, err := s.Backend.PutLeased(ctx, key, value, ttl)
	if err != nil {
		return nil, err
	}
	return &outageLease{Lease: l, s: s}, nil
}

func (l *outageLease) Update(ctx context.Context, value []byte) error {
	if l.s.down.Load() {
		return errors.New("connection refused")
	}
	return l.Lease.Update(ctx, value)
}

func publisher(store Store, inc uint64, bufs *[]segment.Buffer) *Publisher {
	return New(Config{
		Store: store, Key: segment.Key("ferry", "a"), Name: "a", Incarnation: inc, TTL: time.Minute, Timeout: time.Second,
		Log: hclog.NewNullLogger(),
		Describe: func() *segment.Descriptor {
			return Descriptor(Self{Name: "a", Incarnation: inc, MachineID: "m"}, *bufs, []Endpoint{{Transport: "tcp", Endpoint: []byte("ep"),
				Rails: []segment.RailInfo{{Name: "eth0", NUMANode: -1}}}})
		},
	})
}

func stored(t *testing.T, store metastore.Store) *segment.Descriptor {
	t.Helper()
	key := segment.Key("ferry", "a")
	raw, err := store.Get(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	d, err := segment.Decode(key, raw)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPublishKeepsTheNewestThroughAnOutage(t *testing.T) {
	ctx := context.Background()
	store := &outageStore{Backend: metastore.NewMemory()}
	defer store.Close()
	var bufs []segment.Buffer
	p := publisher(store, 7, &bufs)
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if d := stored(t, store); d.Incarnation != 7 || len(d.Buffers) != 0 || string(d.Transports["tcp"]) != "ep" || d.Rails["tcp"][0].Name != "eth0" {
		t.Fatalf("published %+v", d)
	}
	if err := p.Health(); err != nil {
		t.Fatalf("health after a publish: %v", err)
	}
	store.down.Store(true)
	bufs = []segment.Buffer{{Region: 1, Base: 0x1000, Length: 10, Perm: segment.PermRemoteRead, Location: "cpu"}}
	if err := p.Publish(ctx); err != nil {
		t.Fatalf("a publish during an outage failed (it must not fail a Register): %v", err)
	}
	if err := p.Health(); err == nil || !strings.Contains(err.Error(), "connection refused") || !strings.Contains(err.Error(), `"a"`) {
		t.Fatalf("health during the outage: %v; want the cause, naming the engine", err)
	}
	store.down.Store(false)
	if err := p.Publish(ctx); err != nil {
		t.Fatal(err)
	}
	if d := stored(t, store); len(d.Buffers) != 1 {
		t.Fatalf("after the outage the store holds %+v, want the newest descriptor", d)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, p.Key()); !errors.Is(err, metastore.ErrNotFound) {
		t.Fatalf("after Close the key reads %v, want it deleted", err)
	}
}

func TestClaimName(t *testing.T) {
	ctx := context.Background()
	key := segment.Key("ferry", "a")
	put := func(store metastore.Store, d *segment.Descriptor) {
		b, _ := d.Encode()
		if err := store.Put(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		setup   func(metastore.Store)
		wantErr string // "" for a successful claim
	}{
		{"free", func(metastore.Store) {}, ""},
		{"our own incarnation", func(s metastore.Store) { put(s, &segment.Descriptor{Schema: 1, Name: "a", Incarnation: 7}) }, ""},
		{"live, no control address", func(s metastore.Store) { put(s, &segment.Descriptor{Schema: 1, Name: "a", Incarnation: 3}) }, "in use by a live engine"},
		{"dead control address", func(s metastore.Store) {
			put(s, &segment.Descriptor{Schema: 1, Name: "a", Incarnation: 3, Control: "127.0.0.1:1"})
		}, ""},
		{"foreign value", func(s metastore.Store) { s.Put(ctx, key, []byte("hello")) }, "not a Ferry descriptor"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			store := metastore.NewMemory()
			defer store.Close()
			c.setup(store)
			var bufs []segment.Buffer
			p := publisher(store, 7, &bufs)
			defer p.Close(ctx)
			err := p.Publish(ctx)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("claim: %v", err)
			case c.wantErr != "" && (!errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("claim: %v; want ErrNameInUse mentioning %q", err, c.wantErr)
			case c.wantErr == "" && stored(t, store).Incarnation != 7:
				t.Fatal("the claim succeeded but the key does not hold our descriptor")
			}
		})
	}
}

// gateStore's leases block an Update while gate is set, until it is
// closed: a metastore write in flight.
type gateStore struct {
	metastore.Backend
	gate    atomic.Pointer[chan struct{}]
	blocked chan struct{} // an Update is held at the gate
}

type gateLease struct {
	metastore.Lease
	s *gateStore
}

func (s *gateStore) PutLeased(ctx context.Context, key string, value []byte, ttl time.Duration) (metastore.Lease, error) {
	l, err := s.Backend.PutLeased(ctx, key, value, ttl)
	if err != nil {
		return nil, err
	}
	return &gateLease{Lease: l, s: s}, nil
}

func (l *gateLease) Update(ctx context.Context, value []byte) error {
	if g := l.s.gate.Swap(nil); g != nil {
		l.s.blocked <- struct{}{}
		<-*g
	}
	return l.Lease.Update(ctx, value)
}

// Calls that arrive while a write is in flight share one write, and each
// returns only once a write that carries its change is made.
func TestPublishCoalescesABurst(t *testing.T) {
	ctx := context.Background()
	store := &gateStore{Backend: metastore.NewMemory(), blocked: make(chan struct{}, 1)}
	defer store.Close()
	var mu sync.Mutex
	var bufs []segment.Buffer
	add := func(i int) {
		mu.Lock()
		bufs = append(bufs, segment.Buffer{Region: uint32(i + 1), Base: uint64(i+1) << 12, Length: 1, Perm: segment.PermRemoteRead})
		mu.Unlock()
	}
	p := New(Config{
		Store: store, Key: segment.Key("ferry", "a"), Name: "a", Incarnation: 7, TTL: time.Minute, Timeout: 10 * time.Second,
		Log: hclog.NewNullLogger(),
		Describe: func() *segment.Descriptor {
			mu.Lock()
			defer mu.Unlock()
			return Descriptor(Self{Name: "a", Incarnation: 7, MachineID: "m"}, slices.Clone(bufs), nil)
		},
	})
	defer p.Close(ctx)
	if err := p.Publish(ctx); err != nil { // the claim and the lease
		t.Fatal(err)
	}
	gate := make(chan struct{})
	store.gate.Store(&gate)
	first := make(chan error, 1)
	add(0)
	go func() { first <- p.Publish(ctx) }()
	<-store.blocked // the first write is in flight
	const n = 50
	errs := make(chan error, n)
	for i := 1; i <= n; i++ {
		add(i)
		go func() { errs <- p.Publish(ctx) }()
	}
	for p.asked.Load() != n+2 { // every call has asked: the next write covers them all
		runtime.Gosched()
	}
	close(gate)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if w := p.Writes(); w != 3 {
		t.Fatalf("%d writes for the claim, one write in flight and a burst of %d calls; want 3 (the burst shares one)", w, n)
	}
	if d := stored(t, store); len(d.Buffers) != n+1 {
		t.Fatalf("the metastore holds %d buffers, want all %d", len(d.Buffers), n+1)
	}
}

// liveEngine is the control service of an engine that holds a name: it
// answers a ping as name and incarnation.
type liveEngine struct {
	name string
	inc  uint64
}

func (l liveEngine) Descriptor() ([]byte, error)        { return nil, errors.New("not served") }
func (l liveEngine) Identity() (string, uint64)         { return l.name, l.inc }
func (l liveEngine) Status() ([]byte, error)            { return []byte("{}"), nil }
func (l liveEngine) Deliver(control.Notification) error { return nil }

// TestClaimNameWithSecret: with a cluster secret, a live engine's control
// service answers only signed pings; the claim pings it with the secret,
// so a live holder of the name is still seen as live and the claim is
// refused, while a holder that does not answer is replaced.
func TestClaimNameWithSecret(t *testing.T) {
	ctx := context.Background()
	secret := []byte("publish-test-secret-0123456789")
	signer, err := segment.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := control.Listen("127.0.0.1:0", liveEngine{name: "a", inc: 3}, control.Options{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for _, c := range []struct {
		name, control, wantErr string
	}{
		{"live", srv.Addr(), "in use by a live engine"},
		{"dead", "127.0.0.1:1", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := metastore.NewMemory()
			defer store.Close()
			b, err := signer.Encode(&segment.Descriptor{Schema: 1, Name: "a", Incarnation: 3, Control: c.control})
			if err != nil {
				t.Fatal(err)
			}
			key := segment.Key("ferry", "a")
			if err := store.Put(ctx, key, b); err != nil {
				t.Fatal(err)
			}
			var bufs []segment.Buffer
			p := New(Config{
				Store: store, Key: key, Name: "a", Incarnation: 7, TTL: time.Minute, Timeout: time.Second,
				Log: hclog.NewNullLogger(), Signer: signer, Secret: secret,
				Describe: func() *segment.Descriptor {
					return &segment.Descriptor{Schema: 1, Name: "a", Incarnation: 7, Buffers: bufs}
				},
			})
			defer p.Close(ctx)
			err = p.Publish(ctx)
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("claim: %v", err)
			case c.wantErr != "" && (!errors.Is(err, ErrNameInUse) || !strings.Contains(err.Error(), c.wantErr)):
				t.Fatalf("claim over a %s holder: %v; want ErrNameInUse mentioning %q", c.name, err, c.wantErr)
			}
		})
	}
}
