package metastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// backends returns every Backend, each on an empty store: the memory map,
// the embedded server through HTTP and directly, and the real redis-server
// (with keyspace notifications and polling) and etcd when installed.
func backends(t *testing.T) map[string]Backend {
	t.Helper()
	srv, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	// The client talks to a server of its own, so that its keys do not
	// meet server.Store's.
	srv2 := listenLocal(t)
	c, err := NewHTTPClient(srv2.URL())
	if err != nil {
		t.Fatal(err)
	}
	c.PollInterval = 20 * time.Millisecond
	t.Cleanup(func() { c.Close() })
	mem := NewMemory()
	t.Cleanup(func() { mem.Close() })
	m := map[string]Backend{
		"memory":       mem,
		"http":         c,
		"server.Store": srv.Store(),
	}
	if available(t, "redis-server", "redis-server") {
		m["redis"] = sharedRedis(t, RedisOptions{Watch: WatchNotify})
		m["redis-poll"] = sharedRedis(t, RedisOptions{DB: 1, Watch: WatchPoll, PollInterval: 20 * time.Millisecond})
	}
	if available(t, "etcd", "etcd-server") {
		m["etcd"] = sharedEtcd(t)
	}
	return m
}

// available is needBinary for tables: a missing server is left out with a
// note, or fails the test under CI=true.
func available(t *testing.T, bin, pkg string) bool {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not found (Debian package %s); CI must run the tests against it", bin, pkg)
		}
		t.Logf("%s not found (Debian package %s): its backend is left out", bin, pkg)
		return false
	}
	return true
}

// httpDo sends one request on a connection of its own and returns the
// answer's status and body.
func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	return httpDoWith(t, &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, method, url, body)
}

// httpDoWith is httpDo through hc.
func httpDoWith(t *testing.T, hc *http.Client, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond) // polling observable state
	}
}

func present(s Store, key string) bool {
	_, err := s.Get(context.Background(), key)
	return err == nil
}

func gone(s Store, key string) bool {
	_, err := s.Get(context.Background(), key)
	return errors.Is(err, ErrNotFound)
}

// expectEvent reads ch until want arrives; any other event but Resync
// fails the test.
func expectEvent(t *testing.T, ch <-chan Event, want Event, timeout time.Duration) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed while waiting for %v %q", want.Kind, want.Key)
			}
			if ev.Kind == Resync && want.Kind != Resync {
				continue
			}
			if ev.Kind != want.Kind || ev.Key != want.Key || !bytes.Equal(ev.Value, want.Value) || ev.Cause != want.Cause {
				t.Fatalf("event %v %q %q (cause %d), want %v %q %q (cause %d)", ev.Kind, ev.Key, ev.Value, ev.Cause, want.Kind, want.Key, want.Value, want.Cause)
			}
			return
		case <-timer.C:
			t.Fatalf("no %v event for %q within %v", want.Kind, want.Key, timeout)
		}
	}
}

func TestWatchSeesPutAndDelete(t *testing.T) {
	for name, b := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			ch, err := b.Watch(ctx, "w/")
			if err != nil {
				t.Fatal(err)
			}
			must(t, b.Put(ctx, "other/x", []byte("not watched")))
			must(t, b.Put(ctx, "w/a", []byte("1")))
			expectEvent(t, ch, Event{Kind: Put, Key: "w/a", Value: []byte("1")}, 5*time.Second)
			must(t, b.Put(ctx, "w/a", []byte("2")))
			expectEvent(t, ch, Event{Kind: Put, Key: "w/a", Value: []byte("2")}, 5*time.Second)
			must(t, b.Delete(ctx, "w/a"))
			// Redis's notifications tell a DEL from an expiry; the others
			// do not say.
			deleted := map[string]DeleteCause{"redis": CauseDeleted}[name]
			expectEvent(t, ch, Event{Kind: Delete, Key: "w/a", Cause: deleted}, 5*time.Second)

			// A leased key whose holder stops refreshing: the watch
			// reports the expiry. The store's Close stands in for a dead
			// holder here; TestLeaseExpiresWhenHolderIsKilled kills one.
			l, err := b.PutLeased(ctx, "w/leased", []byte("alive"), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			expectEvent(t, ch, Event{Kind: Put, Key: "w/leased", Value: []byte("alive")}, 5*time.Second)
			must(t, l.Close(ctx))
			expectEvent(t, ch, Event{Kind: Delete, Key: "w/leased", Cause: deleted}, 5*time.Second)

			cancel()
			for range ch { // must be closed when ctx ends
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestLeaseLifecycle(t *testing.T) {
	for name, b := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ttl := time.Second
			l, err := b.PutLeased(ctx, "lease/a", []byte("v1"), ttl)
			if err != nil {
				t.Fatal(err)
			}
			// Kept alive well past its ttl.
			deadline := time.Now().Add(2 * ttl)
			for time.Now().Before(deadline) {
				got, err := b.Get(ctx, "lease/a")
				if err != nil || string(got) != "v1" {
					t.Fatalf("leased key during its life: %q, %v", got, err)
				}
				time.Sleep(50 * time.Millisecond) // observing over time
			}
			must(t, l.Update(ctx, []byte("v2")))
			if got, err := b.Get(ctx, "lease/a"); err != nil || string(got) != "v2" {
				t.Fatalf("after Update: %q, %v", got, err)
			}
			// Lost behind the holder's back (deleted by an operator,
			// lost by a restarted server): the next refresh restores it.
			must(t, b.Delete(ctx, "lease/a"))
			eventually(t, 3*ttl, "the lease did not re-create its deleted key", func() bool { return present(b, "lease/a") })
			if got, _ := b.Get(ctx, "lease/a"); string(got) != "v2" {
				t.Fatalf("re-created with %q, want v2", got)
			}
			must(t, l.Close(ctx))
			if !gone(b, "lease/a") {
				t.Fatal("the key survived Lease.Close")
			}
			if err := l.Close(ctx); err != nil {
				t.Fatalf("second Close: %v", err)
			}
			if err := l.Update(ctx, []byte("v3")); err == nil || !strings.Contains(err.Error(), "lease is closed") {
				t.Fatalf("Update after Close: %v", err)
			}
			if _, ok := <-l.Err(); ok {
				t.Fatal("Err() not closed after Close")
			}
			if _, err := b.PutLeased(ctx, "lease/b", nil, time.Millisecond); err == nil {
				t.Fatal("a 1ms ttl was accepted")
			}
		})
	}
}

// TestValuesAreOpaque stores what a corrupted or foreign writer might
// leave under a Ferry key: the stores hand the bytes back unchanged and do
// not judge them (segment.Decode does).
func TestValuesAreOpaque(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	junk := make([]byte, 64<<10)
	for i := range junk {
		junk[i] = byte(rnd.UintN(256))
	}
	values := map[string][]byte{
		"invalid utf-8":   {0xff, 0xfe, 0x00, 0xc3, 0x28},
		"random":          junk,
		"foreign json":    []byte(`{"segment_name":"mooncake","buffers":[{"addr":-1}]}`),
		"newer schema":    []byte("FERRYSEG\x00\x63\x00\x00"),
		"nul and newline": []byte("\x00\r\n\x00"),
	}
	for name, b := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ch, err := b.Watch(ctx, "junk/")
			if err != nil {
				t.Fatal(err)
			}
			for what, v := range values {
				key := "junk/" + strings.ReplaceAll(what, " ", "-")
				must(t, b.Put(ctx, key, v))
				got, err := b.Get(ctx, key)
				if err != nil || !bytes.Equal(got, v) {
					t.Fatalf("%s: got %d bytes, %v; want the %d bytes put", what, len(got), err, len(v))
				}
				expectEvent(t, ch, Event{Kind: Put, Key: key, Value: v}, 5*time.Second)
			}
		})
	}
}

func TestLeaseExpiresWhenHolderIsKilled(t *testing.T) {
	srv := listenLocal(t)
	type tc struct {
		opts  Options
		store func(t *testing.T) Store
		slack time.Duration // how late after ttl the server may drop the key
	}
	cases := map[string]tc{
		"http": {Options{Kind: KindHTTP, URL: srv.URL()}, func(*testing.T) Store { return srv.Store() }, 100 * time.Millisecond},
	}
	if available(t, "redis-server", "redis-server") {
		r := sharedRedis(t, RedisOptions{})
		// Redis expires keys lazily on access and in a background cycle
		// ten times a second: Get sees the expiry at once.
		cases["redis"] = tc{Options{Kind: KindRedis, Address: r.opts.Addr}, func(*testing.T) Store { return r }, 100 * time.Millisecond}
	}
	if available(t, "etcd", "etcd-server") {
		e := sharedEtcd(t)
		// etcd revokes expired leases in a loop that runs every 500ms.
		cases["etcd"] = tc{Options{Kind: KindEtcd, Endpoints: e.opts.Endpoints}, func(*testing.T) Store { return e }, 1500 * time.Millisecond}
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s := c.store(t)
			ttl := time.Second
			key := "killed/" + name
			// Redis's watch tells an expiry from a deletion.
			var events <-chan Event
			if name == "redis" {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				w, err := NewRedis(ctx, RedisOptions{Addr: c.opts.Address, Watch: WatchNotify})
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				if events, err = w.Watch(ctx, key); err != nil {
					t.Fatal(err)
				}
			}
			kill := startHolder(t, holderSpec{Options: c.opts, Key: key, Value: "from the holder", TTL: ttl})
			// Alive while the holder lives, past its ttl.
			deadline := time.Now().Add(2 * ttl)
			for time.Now().Before(deadline) {
				if got, err := s.Get(context.Background(), key); err != nil || string(got) != "from the holder" {
					t.Fatalf("key while its holder lives: %q, %v", got, err)
				}
				time.Sleep(50 * time.Millisecond) // observing over time
			}
			kill()
			killed := time.Now()
			eventually(t, ttl+c.slack+time.Second, "the key outlived its killed holder", func() bool { return gone(s, key) })
			if d := time.Since(killed); d > ttl+c.slack {
				t.Errorf("the key disappeared %v after the kill; want within ttl %v (+%v)", d, ttl, c.slack)
			}
			t.Logf("key gone %v after SIGKILL (ttl %v)", time.Since(killed).Round(time.Millisecond), ttl)
			for events != nil { // the holder's puts, then the expiry
				select {
				case ev := <-events:
					if ev.Kind == Delete {
						if ev.Cause != CauseExpired {
							t.Errorf("the expired key's event: %v, cause %d; want cause CauseExpired", ev.Kind, ev.Cause)
						}
						events = nil
					}
				case <-time.After(5 * time.Second):
					t.Fatal("no delete event for the expired key")
				}
			}
		})
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	for _, o := range []Options{{Kind: KindNone}, {Kind: KindEmbedded, Listen: "127.0.0.1:0"}} {
		b, err := Open(ctx, o)
		if err != nil {
			t.Fatalf("Open(%+v): %v", o, err)
		}
		must(t, b.Put(ctx, "k", []byte("v")))
		if e, ok := b.(*Embedded); ok {
			c, err := Open(ctx, Options{Kind: KindHTTP, URL: e.URL()})
			if err != nil {
				t.Fatal(err)
			}
			if got, err := c.Get(ctx, "k"); err != nil || string(got) != "v" {
				t.Fatalf("through %s: %q, %v", e.URL(), got, err)
			}
			c.Close()
		}
		must(t, b.Close())
	}
	bad := []struct {
		o    Options
		want string
	}{
		{Options{Kind: "zookeeper"}, `unknown kind "zookeeper"`},
		{Options{Kind: KindRedis}, "no address"},
		{Options{Kind: KindEtcd}, "no endpoints"},
		{Options{Kind: KindHTTP, URL: "localhost:1"}, "scheme must be http or https"},
		{Options{Kind: KindRedis, Address: "h:1", CAFile: "/x"}, "TLS is off"},
		{Options{Kind: KindRedis, Address: "h:1", TLS: true, CAFile: "/nonexistent/ca.pem"}, "no such file"},
		{Options{Kind: KindRedis, Address: "h:1", TLS: true, CAFile: os.Args[0]}, "no PEM certificates"},
	}
	for _, tt := range bad {
		_, err := Open(ctx, tt.o)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Open(%+v): %v; want %q", tt.o, err, tt.want)
		}
	}
}

func TestUnreachableFailsFast(t *testing.T) {
	addr := closedPort(t)
	for _, o := range []Options{
		{Kind: KindRedis, Address: addr},
		{Kind: KindEtcd, Endpoints: []string{"http://" + addr}},
	} {
		t.Run(o.Kind, func(t *testing.T) {
			start := time.Now()
			b, err := Open(context.Background(), o)
			if err == nil {
				b.Close()
				t.Fatal("Open of a closed port succeeded")
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("failing took %v; a refused connection should fail at once", d)
			}
			for _, want := range []string{"metastore " + o.Kind + " ", addr, "connection refused", "is " + map[string]string{"redis": "redis-server", "etcd": "etcd"}[o.Kind] + " running there?"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// TestHTTPLeaseWithoutExtensions: a server that ignores ttl_ms and has no
// listing (Mooncake's protocol) is probed as such, and a lease works on it:
// the key is written, kept by re-putting it and deleted on Close. (A lease
// used to fail there, deleting its key: an engine pointed at a Mooncake
// server could not start.)
func TestHTTPLeaseWithoutExtensions(t *testing.T) {
	mooncake := NewServer()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		q.Del("ttl_ms")
		q.Del("prefix")
		r.URL.RawQuery = q.Encode()
		mooncake.ServeHTTP(w, r)
	}))
	defer hs.Close()
	c, err := NewHTTPClient(hs.URL + "/metadata")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	l, err := c.PutLeased(ctx, "k", []byte("v"), time.Second)
	if err != nil {
		t.Fatalf("PutLeased on a Mooncake server: %v", err)
	}
	if c.Dialect() != DialectMooncake {
		t.Errorf("probed as %v", c.Dialect())
	}
	if v, ok := mooncake.mem.get("k"); !ok || string(v) != "v" {
		t.Errorf("the lease's key holds %q, %v", v, ok)
	}
	if _, err := c.Watch(ctx, "p/"); err != nil {
		t.Fatalf("Watch on a Mooncake server: %v", err)
	}
	must(t, l.Close(ctx))
	if _, ok := mooncake.mem.get("k"); ok {
		t.Error("the closed lease left its key behind")
	}
	if _, err := c.PutLeased(ctx, "k", nil, 0); err == nil || !strings.Contains(err.Error(), "ttl 0s is shorter") {
		t.Fatalf("ttl 0: %v", err)
	}
}

func TestServerExtensions(t *testing.T) {
	srv := listenLocal(t)
	for _, q := range []string{"ttl_ms=abc", "ttl_ms=0", "ttl_ms=-5", fmt.Sprintf("ttl_ms=%d", MaxLeaseTTL.Milliseconds()+1)} {
		code, body := httpDo(t, "PUT", srv.URL()+"?key=k&"+q, "v")
		if code != 400 || !strings.Contains(body, "bad ttl_ms") {
			t.Errorf("PUT with %s: %d %q", q, code, body)
		}
	}
	code, _ := httpDo(t, "PUT", srv.URL()+"?key=a%2F1&ttl_ms=60000", "x")
	if code != 200 {
		t.Fatalf("PUT with ttl: %d", code)
	}
	code, body := httpDo(t, "GET", srv.URL()+"?prefix=a%2F", "")
	if code != 200 || body != `{"entries":[{"key":"a/1","value":"eA=="}]}`+"\n" {
		t.Fatalf("listing: %d %q", code, body)
	}
}
