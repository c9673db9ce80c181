package metastoretest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// MooncakeFlavor picks which of Mooncake's HTTP metadata servers the
// stand-in answers as. They share the protocol (GET, PUT and DELETE on
// /metadata?key=K, keys that never expire, no listing) and differ in
// details that a client must survive.
type MooncakeFlavor int

const (
	// MooncakeGo answers as mooncake-transfer-engine/example/
	// http-metadata-server/main.go (gin): DELETE answers 200 whether or
	// not the key exists, an empty key is a key like any other, any other
	// path or method answers gin's 404 "404 page not found".
	MooncakeGo MooncakeFlavor = iota
	// MooncakePython answers as mooncake-wheel/mooncake/
	// http_metadata_server.py (aiohttp; the C++ server in mooncake-store
	// answers the same way): an empty key answers 400, DELETE of an
	// absent key 404, a second PUT of a key containing "rpc_meta" 400,
	// another method on /metadata 405, another path aiohttp's 404.
	MooncakePython
)

func (f MooncakeFlavor) String() string {
	if f == MooncakePython {
		return "mooncake-python"
	}
	return "mooncake-go"
}

// Mooncake is a stand-in for Mooncake's HTTP metadata server, written from
// its sources (kvcache-ai/Mooncake at 3b5a594): the same paths, status
// codes, bodies and content types, so that Ferry's client is tested
// against what a Mooncake deployment runs without Mooncake's build. It
// also counts the requests per key, for tests that wait for a heartbeat.
type Mooncake struct {
	// URL is the metadata URL, http://127.0.0.1:port/metadata.
	URL    string
	flavor MooncakeFlavor
	srv    *httptest.Server

	mu      sync.Mutex
	store   map[string][]byte
	puts    map[string]int
	deletes map[string]int
	changed chan struct{} // closed and replaced at every answered request
}

const mooncakeJSON = "application/json; charset=utf-8"

// StartMooncake starts a stand-in of flavor f on a free loopback port; it
// stops when the test ends.
func StartMooncake(t testing.TB, f MooncakeFlavor) *Mooncake {
	t.Helper()
	m := &Mooncake{flavor: f, store: map[string][]byte{}, puts: map[string]int{}, deletes: map[string]int{}, changed: make(chan struct{})}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	m.URL = m.srv.URL + "/metadata"
	return m
}

// Close stops the server; requests then fail with connection refused.
func (m *Mooncake) Close() { m.srv.Close() }

func (m *Mooncake) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/metadata" {
		m.notFoundPage(w)
		return
	}
	key := r.URL.Query().Get("key")
	if m.flavor == MooncakePython {
		key = strings.TrimSpace(key)
		if key == "" {
			reply(w, http.StatusBadRequest, "metadata key is required")
			return
		}
	}
	switch r.Method {
	case http.MethodGet:
		m.mu.Lock()
		v, ok := m.store[key]
		m.mu.Unlock()
		if !ok {
			reply(w, http.StatusNotFound, "metadata not found")
			return
		}
		replyBytes(w, http.StatusOK, v)
	case http.MethodPut:
		v, err := io.ReadAll(r.Body)
		if err != nil {
			reply(w, http.StatusBadRequest, "invalid request")
			return
		}
		m.mu.Lock()
		if _, dup := m.store[key]; dup && m.flavor == MooncakePython && strings.Contains(key, "rpc_meta") {
			m.mu.Unlock()
			reply(w, http.StatusBadRequest, "Duplicate rpc_meta key not allowed")
			return
		}
		m.store[key] = v
		m.puts[key]++
		m.signal()
		m.mu.Unlock()
		reply(w, http.StatusOK, "metadata updated")
	case http.MethodDelete:
		m.mu.Lock()
		_, ok := m.store[key]
		delete(m.store, key)
		m.deletes[key]++
		m.signal()
		m.mu.Unlock()
		if !ok && m.flavor == MooncakePython {
			reply(w, http.StatusNotFound, "metadata not found")
			return
		}
		reply(w, http.StatusOK, "metadata deleted")
	default:
		if m.flavor == MooncakePython {
			reply(w, http.StatusMethodNotAllowed, "Method not allowed")
			return
		}
		m.notFoundPage(w)
	}
}

// notFoundPage is the router's answer to a path (or, in gin, a method) it
// has no route for.
func (m *Mooncake) notFoundPage(w http.ResponseWriter) {
	if m.flavor == MooncakePython {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, "404: Not Found")
		return
	}
	w.Header().Set("Content-Type", "text/plain") // gin's, without a charset
	w.WriteHeader(http.StatusNotFound)
	_, _ = io.WriteString(w, "404 page not found")
}

func reply(w http.ResponseWriter, code int, text string) { replyBytes(w, code, []byte(text)) }

func replyBytes(w http.ResponseWriter, code int, b []byte) {
	w.Header().Set("Content-Type", mooncakeJSON)
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// signal wakes the waiters; m.mu held.
func (m *Mooncake) signal() {
	close(m.changed)
	m.changed = make(chan struct{})
}

// Value returns what the server holds under key.
func (m *Mooncake) Value(key string) ([]byte, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.store[key]
	return v, ok
}

// Keys returns the keys the server holds, sorted.
func (m *Mooncake) Keys() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.store))
	for k := range m.store {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// Set stores key=v as another client's PUT would.
func (m *Mooncake) Set(key string, v []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.store[key] = append([]byte(nil), v...)
	m.signal()
}

// Remove deletes key as another client's DELETE would.
func (m *Mooncake) Remove(key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.store, key)
	m.signal()
}

// Puts returns how many PUTs of key the server has answered.
func (m *Mooncake) Puts(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.puts[key]
}

// Deletes returns how many DELETEs of key the server has answered.
func (m *Mooncake) Deletes(key string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deletes[key]
}

// waitLimit is how long Until waits before it fails the test: a bound
// against a hang, far above any heartbeat the tests use.
const waitLimit = 30 * time.Second

// Until waits until cond, evaluated after each request the server
// answers (and at once), holds; it fails the test, saying what, if that
// takes longer than 30 s.
func (m *Mooncake) Until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		m.mu.Lock()
		ch := m.changed
		m.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("Mooncake stand-in: %s: not after %v", what, waitLimit)
		}
	}
}
