package metastore

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

var flavors = []metastoretest.MooncakeFlavor{metastoretest.MooncakeGo, metastoretest.MooncakePython}

func openHTTP(t *testing.T, url string) *HTTPClient {
	t.Helper()
	b, err := Open(context.Background(), Options{Kind: KindHTTP, URL: url, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { b.Close() })
	return b.(*HTTPClient)
}

// TestProbeTellsTheServers: Open probes an HTTP metastore and tells
// Ferry's from Mooncake's; the probe leaves no key behind.
func TestProbeTellsTheServers(t *testing.T) {
	srv := listenLocal(t)
	if c := openHTTP(t, srv.URL()); c.Dialect() != DialectFerry {
		t.Errorf("Ferry's server probed as %v", c.Dialect())
	}
	if code, body := httpDo(t, "GET", srv.URL()+"?prefix="+probePrefix, ""); code != 200 || body != `{"entries":[]}`+"\n" {
		t.Errorf("after the probe the server lists %d %q under %s", code, body, probePrefix)
	}
	// A Ferry server too busy to list (503) is still Ferry's: the probe
	// does not take it for Mooncake's, whose keys never expire.
	busy := NewServer()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("prefix") {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		busy.ServeHTTP(w, r)
	}))
	defer hs.Close()
	if c := openHTTP(t, hs.URL+"/metadata"); c.Dialect() != DialectFerry {
		t.Errorf("a busy Ferry server probed as %v", c.Dialect())
	}
	for _, f := range flavors {
		t.Run(f.String(), func(t *testing.T) {
			m := metastoretest.StartMooncake(t, f)
			c := openHTTP(t, m.URL)
			if c.Dialect() != DialectMooncake {
				t.Errorf("probed as %v, want mooncake", c.Dialect())
			}
			if keys := m.Keys(); len(keys) != 0 {
				t.Errorf("the probe left %q on the server", keys)
			}
		})
	}
}

// TestNotAMetadataServer: a URL that answers, but not as a metadata
// server, fails Open with an error that names the URL, the step and what
// was expected, and leaves nothing on the server. (Open used to accept any
// URL, and the engine failed later with a misleading error.)
func TestNotAMetadataServer(t *testing.T) {
	html := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><body>Welcome to nginx!</body></html>"))
	}
	var mu sync.Mutex
	wrapped := map[string]string{} // stores values, returns them wrapped in JSON
	wrapping := func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		k := r.URL.Query().Get("key")
		switch r.Method {
		case http.MethodPut:
			b, _ := io.ReadAll(r.Body)
			wrapped[k] = string(b)
		case http.MethodDelete:
			delete(wrapped, k)
		case http.MethodGet:
			v, ok := wrapped[k]
			if !ok {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write([]byte(`{"value":"` + v + `"}`))
		}
	}
	moon := metastoretest.StartMooncake(t, metastoretest.MooncakeGo)
	for _, c := range []struct {
		name, path string
		h          http.HandlerFunc
		url        string // instead of a server of h
		want       string
	}{
		{name: "404 everywhere", path: "/metadata", h: http.NotFound, want: `PUT ?key=ferry-probe/`},
		{name: "an HTML page", path: "/metadata", h: html, want: `answered 200 OK (text/html) "<html><body>Welcome to nginx!`},
		{name: "values changed", path: "/metadata", h: wrapping, want: "expected 200 with the"},
		{name: "Mooncake's without its path", url: strings.TrimSuffix(moon.URL, "/metadata") + "/", want: `404 Not Found (text/plain) "404 page not found"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			url := c.url
			if url == "" {
				hs := httptest.NewServer(c.h)
				defer hs.Close()
				url = hs.URL + c.path
			}
			_, err := Open(context.Background(), Options{Kind: KindHTTP, URL: url})
			if !errors.Is(err, ErrNotMetastore) {
				t.Fatalf("Open: %v, want ErrNotMetastore", err)
			}
			t.Log(err)
			for _, want := range []string{"metastore " + url + ": ", "not a Mooncake or Ferry metadata server", c.want, "expected", "check metastore.url"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
	mu.Lock()
	defer mu.Unlock()
	if len(wrapped) != 0 || len(moon.Keys()) != 0 {
		t.Errorf("the failed probes left keys: %v, %v", wrapped, moon.Keys())
	}
}

// TestProbeUnreachable: nothing listening is a connection error, not
// ErrNotMetastore, and it says where.
func TestProbeUnreachable(t *testing.T) {
	m := metastoretest.StartMooncake(t, metastoretest.MooncakeGo)
	m.Close()
	_, err := Open(context.Background(), Options{Kind: KindHTTP, URL: m.URL})
	if err == nil || errors.Is(err, ErrNotMetastore) || !strings.Contains(err.Error(), m.URL) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Open of a closed server: %v", err)
	}
}

// TestMooncakeLease: on a Mooncake server a lease PUTs its key again on a
// heartbeat (which puts back a key someone deleted), Update rewrites it,
// Close deletes it, and closing the client deletes the keys of the leases
// still open.
func TestMooncakeLease(t *testing.T) {
	for _, f := range flavors {
		t.Run(f.String(), func(t *testing.T) {
			ctx := context.Background()
			m := metastoretest.StartMooncake(t, f)
			c := openHTTP(t, m.URL)
			const key = "ferry/segments/a"
			l, err := c.PutLeased(ctx, key, []byte("v1"), 30*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if v, ok := m.Value(key); !ok || string(v) != "v1" {
				t.Fatalf("after PutLeased the server holds %q, %v", v, ok)
			}
			m.Until(t, "three heartbeats", func() bool { return m.Puts(key) >= 4 })
			m.Remove(key)
			m.Until(t, "the deleted key put back", func() bool { v, ok := m.Value(key); return ok && string(v) == "v1" })
			if err := l.Update(ctx, []byte("v2")); err != nil {
				t.Fatal(err)
			}
			if v, _ := m.Value(key); string(v) != "v2" {
				t.Fatalf("after Update the server holds %q", v)
			}
			if err := l.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if _, ok := m.Value(key); ok {
				t.Fatal("Close left the key")
			}
			puts := m.Puts(key)
			if err := l.Close(ctx); err != nil {
				t.Fatalf("second Close: %v", err)
			}

			l2, err := c.PutLeased(ctx, key+"2", []byte("w"), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			_ = l2
			c.Close()
			if _, ok := m.Value(key + "2"); ok {
				t.Error("closing the client left an open lease's key on a server that never expires it")
			}
			if m.Puts(key) != puts {
				t.Error("a closed lease PUT its key again")
			}
		})
	}
}

// TestMooncakeLeaseRefusesRPCMeta: Mooncake's servers refuse to replace
// keys containing "rpc_meta", so such a key cannot be leased there.
func TestMooncakeLeaseRefusesRPCMeta(t *testing.T) {
	m := metastoretest.StartMooncake(t, metastoretest.MooncakePython)
	c := openHTTP(t, m.URL)
	_, err := c.PutLeased(context.Background(), "ferry/segments/rpc_meta_a", []byte("v"), time.Second)
	if err == nil || !strings.Contains(err.Error(), `contains "rpc_meta"`) || !strings.Contains(err.Error(), m.URL) {
		t.Fatalf("PutLeased of an rpc_meta key: %v", err)
	}
	if keys := m.Keys(); len(keys) != 0 {
		t.Errorf("left %q", keys)
	}
}

// TestMooncakeWatch: a Mooncake server cannot list, so a watch polls the
// keys under its prefix that the client has read, written or leased: it
// reports their changes and deletions, and nothing of keys it never named.
func TestMooncakeWatch(t *testing.T) {
	for _, f := range flavors {
		t.Run(f.String(), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			m := metastoretest.StartMooncake(t, f)
			c := openHTTP(t, m.URL)
			m.Set("p/a", []byte("a1"))
			if v, err := c.Get(ctx, "p/a"); err != nil || string(v) != "a1" {
				t.Fatalf("Get: %q, %v", v, err)
			}
			events, err := c.Watch(ctx, "p/")
			if err != nil {
				t.Fatal(err)
			}
			next := func(want Event) {
				t.Helper()
				ev, ok := Next(ctx, events)
				if !ok || ev.Kind != want.Kind || ev.Key != want.Key || string(ev.Value) != string(want.Value) {
					t.Fatalf("event %v %q %q (open %v), want %v %q %q", ev.Kind, ev.Key, ev.Value, ok, want.Kind, want.Key, want.Value)
				}
			}
			m.Set("p/a", []byte("a2"))
			next(Event{Kind: Put, Key: "p/a", Value: []byte("a2")})
			m.Set("p/b", []byte("never read")) // sorts after p/a's deletion: a poll of it would come next
			m.Remove("p/a")
			next(Event{Kind: Delete, Key: "p/a"})
			m.Set("p/a", []byte("a3"))
			next(Event{Kind: Put, Key: "p/a", Value: []byte("a3")})
			cancel()
			for range events { // closed when ctx ends
			}
		})
	}
}

// TestMooncakeKeyOutlivesKilledHolder documents what a Mooncake server
// means for an engine that crashes: nothing expires its key, so the
// value stays after the holder is killed (peers then judge it by its
// incarnation; see docs/mooncake.md).
func TestMooncakeKeyOutlivesKilledHolder(t *testing.T) {
	m := metastoretest.StartMooncake(t, metastoretest.MooncakeGo)
	kill := startHolder(t, holderSpec{Options: Options{Kind: KindHTTP, URL: m.URL}, Key: "killed/mooncake", Value: "from the holder", TTL: 30 * time.Millisecond})
	m.Until(t, "a heartbeat", func() bool { return m.Puts("killed/mooncake") >= 2 })
	kill()
	if v, ok := m.Value("killed/mooncake"); !ok || string(v) != "from the holder" {
		t.Fatalf("after the kill the server holds %q, %v; Mooncake's server never expires a key", v, ok)
	}
	if m.Deletes("killed/mooncake") != 0 {
		t.Error("a killed holder deleted its key")
	}
}
