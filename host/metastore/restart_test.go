package metastore

import (
	"context"
	"errors"
	"github.com/ferrydev/ferry/host/metastore/metastoretest"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// waitErr waits for the lease to report trouble.
func waitErr(t *testing.T, l Lease, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-l.Err():
		if err == nil {
			t.Fatal("Err() closed while the lease should be retrying")
		}
		return err
	case <-time.After(timeout):
		t.Fatalf("the lease reported no trouble within %v of the outage", timeout)
	}
	return nil
}

func TestRedisLeaseAndWatchSurviveRestart(t *testing.T) {
	srv := metastoretest.NewRedis(t)
	ctx := context.Background()
	r, err := NewRedis(ctx, RedisOptions{Addr: srv.Addr, Watch: WatchNotify})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ttl := time.Second
	l, err := r.PutLeased(ctx, "ferry/seg/a", []byte("desc-a"), ttl)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := r.Watch(wctx, "ferry/")
	if err != nil {
		t.Fatal(err)
	}

	srv.Stop() // no persistence: the restarted server is empty
	err = waitErr(t, l, 3*ttl)
	for _, want := range []string{"metastore redis " + srv.Addr, `"ferry/seg/a"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("lease error %q does not contain %q", err, want)
		}
	}
	if _, err := r.Get(ctx, "ferry/seg/a"); err == nil || errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("Get while the server is down: %v", err)
	}
	srv.Start(t)

	eventually(t, 5*time.Second, "the lease did not re-create its key after the restart", func() bool { return present(r, "ferry/seg/a") })
	expectEvent(t, ch, Event{Kind: Resync}, 5*time.Second)
	// Notifications work again: the watch re-enabled them on the new
	// server.
	must(t, r.Put(ctx, "ferry/seg/b", []byte("desc-b")))
	expectEventSkipping(t, ch, Event{Kind: Put, Key: "ferry/seg/b", Value: []byte("desc-b")}, "ferry/seg/a", 5*time.Second)
	must(t, l.Close(ctx))
	if !gone(r, "ferry/seg/a") {
		t.Fatal("key left after Close")
	}
}

// expectEventSkipping is expectEvent that also lets events of key skip pass.
func expectEventSkipping(t *testing.T, ch <-chan Event, want Event, skip string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("watch closed")
			}
			if ev.Kind == Resync || ev.Key == skip {
				continue
			}
			if ev.Kind != want.Kind || ev.Key != want.Key || string(ev.Value) != string(want.Value) {
				t.Fatalf("event %v %q %q, want %v %q %q", ev.Kind, ev.Key, ev.Value, want.Kind, want.Key, want.Value)
			}
			return
		case <-time.After(time.Until(deadline)):
			t.Fatalf("no %v event for %q within %v", want.Kind, want.Key, timeout)
		}
	}
}

func TestEtcdLeaseSurvivesRestartAndLoss(t *testing.T) {
	srv := metastoretest.NewEtcd(t)
	ctx := context.Background()
	e, err := NewEtcd(ctx, EtcdOptions{Endpoints: []string{srv.EtcdEndpoint()}, DialTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ttl := time.Second
	l, err := e.PutLeased(ctx, "ferry/seg/a", []byte("desc-a"), ttl)
	if err != nil {
		t.Fatal(err)
	}

	srv.Stop()
	err = waitErr(t, l, 5*ttl)
	if !strings.Contains(err.Error(), "metastore etcd "+srv.EtcdEndpoint()) || !strings.Contains(err.Error(), `"ferry/seg/a"`) {
		t.Errorf("lease error %q does not name the backend and key", err)
	}
	srv.Start(t) // same data dir
	eventually(t, 5*time.Second, "the key is not there after the restart", func() bool { return present(e, "ferry/seg/a") })
	// Still kept alive afterwards, well past the ttl.
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if !present(e, "ferry/seg/a") {
			t.Fatal("the key expired after the restart: the lease is not kept alive")
		}
		time.Sleep(50 * time.Millisecond) // observing over time
	}

	// The lease is lost (as when it expired during a long outage): the
	// keeper grants a new one and puts the value again.
	leases, err := e.client.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ls := range leases.Leases {
		if _, err := e.client.Revoke(ctx, ls.ID); err != nil {
			t.Fatal(err)
		}
	}
	if !gone(e, "ferry/seg/a") {
		t.Fatal("revoking the lease left the key")
	}
	eventually(t, 5*time.Second, "the key was not put again under a new lease", func() bool { return present(e, "ferry/seg/a") })
	resp, err := e.client.Get(ctx, "ferry/seg/a")
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 || string(resp.Kvs[0].Value) != "desc-a" {
		t.Fatalf("re-created key: %+v, %v", resp, err)
	}
	must(t, l.Close(ctx))
	if !gone(e, "ferry/seg/a") {
		t.Fatal("key left after Close")
	}
	if leases, _ := e.client.Leases(ctx); len(leases.Leases) != 0 {
		t.Errorf("Close left %d leases", len(leases.Leases))
	}
}

func TestRedisCredentials(t *testing.T) {
	srv := metastoretest.NewRedis(t, "--requirepass", "s3cret")
	ctx := context.Background()
	for _, tt := range []struct {
		name, user, pass, want string
	}{
		{"wrong password", "", "nope", "WRONGPASS"},
		{"no password", "", "", "NOAUTH"},
		{"unknown user", "mallory", "s3cret", "WRONGPASS"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := NewRedis(ctx, RedisOptions{Addr: srv.Addr, Username: tt.user, Password: tt.pass, DialTimeout: 2 * time.Second})
			if err == nil {
				r.Close()
				t.Fatal("connected with bad credentials")
			}
			for _, want := range []string{"metastore redis " + srv.Addr, tt.want, "check metastore.username and metastore.password"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}

	admin, err := NewRedis(ctx, RedisOptions{Addr: srv.Addr, Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// A user that may not run CONFIG: Watch falls back to polling.
	must(t, admin.client.Do(ctx, "ACL", "SETUSER", "ferry", "on", ">pw", "~*", "&*", "+@all", "-config").Err())
	r, err := NewRedis(ctx, RedisOptions{Addr: srv.Addr, Username: "ferry", Password: "pw", PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.enableNotifications(ctx); !errors.Is(err, errConfigRefused) {
		t.Fatalf("CONFIG as a user without +config: %v", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := r.Watch(wctx, "ferry/")
	if err != nil {
		t.Fatal(err)
	}
	must(t, r.Put(ctx, "ferry/x", []byte("1")))
	expectEvent(t, ch, Event{Kind: Put, Key: "ferry/x", Value: []byte("1")}, 5*time.Second)
	strict, err := NewRedis(ctx, RedisOptions{Addr: srv.Addr, Username: "ferry", Password: "pw", Watch: WatchNotify})
	if err != nil {
		t.Fatal(err)
	}
	defer strict.Close()
	if _, err := strict.Watch(wctx, "ferry/"); err == nil || !strings.Contains(err.Error(), "CONFIG") {
		t.Fatalf("Watch with notifications required, CONFIG refused: %v", err)
	}
}

func TestRedisForeignValue(t *testing.T) {
	r := sharedRedis(t, RedisOptions{})
	ctx := context.Background()
	must(t, r.client.LPush(ctx, "ferry/seg/list", "not a descriptor").Err())
	_, err := r.Get(ctx, "ferry/seg/list")
	if err == nil || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a list: %v", err)
	}
	for _, want := range []string{"metastore redis " + r.opts.Addr, `GET key "ferry/seg/list"`, "WRONGTYPE"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestHTTPWatchResyncsAfterOutage(t *testing.T) {
	// The server answers 503 while down; refused counts those answers, so
	// the test sees when the watcher has met the outage.
	meta := NewServer()
	var down atomic.Bool
	var refused atomic.Int64
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			refused.Add(1)
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return
		}
		meta.ServeHTTP(w, r)
	}))
	defer hs.Close()
	c, err := NewHTTPClient(hs.URL + "/metadata")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.PollInterval = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := c.Watch(ctx, "p/")
	if err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	eventually(t, 5*time.Second, "the watcher never polled the server while it was down", func() bool { return refused.Load() > 0 })
	must(t, meta.Store().Put(ctx, "p/new", []byte("x")))
	down.Store(false)
	expectEvent(t, ch, Event{Kind: Resync}, 5*time.Second)
	expectEvent(t, ch, Event{Kind: Put, Key: "p/new", Value: []byte("x")}, 5*time.Second)
}
