package metastore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Path is where Listen serves the metastore, as in Mooncake's HTTP metadata
// server.
const Path = "/metadata"

// Server is the embedded HTTP metastore: an in-memory map served over the
// protocol of Mooncake's HTTP metadata server.
//
//	GET    <path>?key=K   200 with the value as body; 404 when absent
//	PUT    <path>?key=K   body is the value; 200; 413 beyond MaxValueSize;
//	                      507 past a quota (ServerOptions: the keys and
//	                      bytes of the store, its headroom for engines'
//	                      descriptors, a client's share), with a text
//	                      that says which and what to do
//	DELETE <path>?key=K   200; 404 when absent (as Mooncake answers)
//
// Ferry adds two extensions that Mooncake's clients never send:
//
//	PUT <path>?key=K&ttl_ms=N   the key expires N ms after this PUT unless
//	                            PUT again (a lease; see HTTPClient.PutLeased)
//	GET <path>?prefix=P         200 with a JSON object {"entries": [{"key":
//	                            K, "value": base64}, ...]} of every live key
//	                            under P (for polling watchers); at
//	                            most maxListings at once and
//	                            maxClientListings from one address,
//	                            503 beyond; each written within
//	                            listingTimeout or cut
//
// Answers to the extensions carry the header X-Ferry-Metastore: 1, so a
// client can tell a server that ignored them. An empty or missing key
// answers 400, one longer than MaxKeySize 414; any other method answers 405 with an
// Allow header. Server does not look at the request path, so it can be
// mounted anywhere; Listen mounts it at Path. The zero value is not usable:
// call NewServer.
type Server struct {
	mem      *memory
	store    *memStore
	listings chan struct{} // one token per listing being answered

	mu      sync.Mutex
	listing map[string]int // listings being answered, per client address
	// listingTimeout bounds writing one listing; tests lower it.
	listingTimeout time.Duration
}

// maxListings bounds the prefix listings answered at once, and
// maxClientListings those of one client address. A listing is written
// entry by entry from the map's own values, so each holds at most the
// store (MaxTotalSize) alive and one entry's encoding.
const (
	maxListings       = 16
	maxClientListings = 2
)

// listingTimeout bounds how long one listing may take to be written: a
// client that does not read it (or reads it slowly) has its connection
// cut then, and its slot freed. A polling watcher lists every second,
// and a listing of the whole store at its quota is 64 MiB.
const listingTimeout = 10 * time.Second

// NewServer returns an empty Server with the default quotas. Its map
// lives as long as the Server.
func NewServer() *Server { return NewServerWith(ServerOptions{}) }

// NewServerWith returns an empty Server with the quotas of o.
func NewServerWith(o ServerOptions) *Server {
	m := newMemory(o)
	return &Server{mem: m, store: newMemStore(m), listings: make(chan struct{}, maxListings),
		listing: make(map[string]int), listingTimeout: listingTimeout}
}

// Store returns the server's map as a Backend, so that the engine that
// embeds the server reads, writes, leases and watches it without a round
// trip through HTTP. Closing the returned Backend stops the leases and
// watches started through it; the map stays served.
func (s *Server) Store() Backend { return s.store }

// ExtensionHeader marks answers to Ferry's extensions of the protocol.
const ExtensionHeader = "X-Ferry-Metastore"

// MaxLeaseTTL bounds ttl_ms on a PUT.
const MaxLeaseTTL = 24 * time.Hour

type listAnswer struct {
	Entries []listEntry `json:"entries"`
}

type listEntry struct {
	Key   string `json:"key"`
	Value []byte `json:"value"`
}

const allowedMethods = "GET, PUT, DELETE"

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet, http.MethodPut, http.MethodDelete:
	default:
		w.Header().Set("Allow", allowedMethods)
		http.Error(w, "method not allowed: use "+allowedMethods, http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	if r.Method == http.MethodGet && q.Has("prefix") && !q.Has("key") {
		s.serveList(w, clientOf(r), q.Get("prefix"))
		return
	}
	key := q.Get("key")
	if key == "" {
		http.Error(w, "missing key: use ?key=<key>", http.StatusBadRequest)
		return
	}
	if len(key) > MaxKeySize {
		http.Error(w, fmt.Sprintf("key of %d bytes is too long: the limit is %d", len(key), MaxKeySize), http.StatusRequestURITooLong)
		return
	}

	switch r.Method {
	case http.MethodGet:
		v, ok := s.mem.get(key)
		if !ok {
			http.Error(w, "metadata not found", http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(v)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(v)

	case http.MethodPut:
		if r.ContentLength > MaxValueSize {
			tooLarge(w)
			return
		}
		v, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValueSize))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				tooLarge(w)
				return
			}
			http.Error(w, "reading body: "+err.Error(), http.StatusBadRequest)
			return
		}
		if q.Has("ttl_ms") {
			ms, err := strconv.ParseInt(q.Get("ttl_ms"), 10, 64)
			if err != nil || ms < MinLeaseTTL.Milliseconds() || ms > MaxLeaseTTL.Milliseconds() {
				http.Error(w, fmt.Sprintf("bad ttl_ms %q: want whole milliseconds in %d..%d",
					q.Get("ttl_ms"), MinLeaseTTL.Milliseconds(), MaxLeaseTTL.Milliseconds()), http.StatusBadRequest)
				return
			}
			if err := s.mem.putTTL(clientOf(r), key, v, time.Duration(ms)*time.Millisecond); err != nil {
				full(w, err)
				return
			}
			w.Header().Set(ExtensionHeader, "1")
		} else if err := s.mem.putTTL(clientOf(r), key, v, 0); err != nil {
			full(w, err)
			return
		}
		writeText(w, http.StatusOK, "metadata updated")

	case http.MethodDelete:
		if !s.mem.delete(key) {
			http.Error(w, "metadata not found", http.StatusNotFound)
			return
		}
		writeText(w, http.StatusOK, "metadata deleted")
	}
}

// clientOf returns the address a request came from, without its port:
// the client whose share its writes count against.
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil || host == "" {
		return r.RemoteAddr
	}
	return host
}

// full answers a write refused by a quota: 507, with the text of err
// (which quota, and what to do) and the extension header, so that a
// client can tell a full Ferry metastore from another server.
func full(w http.ResponseWriter, err error) {
	w.Header().Set(ExtensionHeader, "1")
	http.Error(w, err.Error(), http.StatusInsufficientStorage)
}

// takeListing takes a listing slot for client, or says why not.
func (s *Server) takeListing(client string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listing[client] >= maxClientListings {
		return fmt.Sprintf("busy: %d prefix listings for %s are being answered, the limit for one client", maxClientListings, client)
	}
	select {
	case s.listings <- struct{}{}:
	default:
		return fmt.Sprintf("busy: %d prefix listings are being answered, the limit", maxListings)
	}
	s.listing[client]++
	return ""
}

func (s *Server) giveListing(client string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	<-s.listings
	if s.listing[client]--; s.listing[client] <= 0 {
		delete(s.listing, client)
	}
}

// serveList writes the listAnswer of prefix one entry at a time, so that
// answering it costs one entry's encoding beyond the map. The whole
// answer must be written within listingTimeout: a client that does not
// read it has its connection cut, so that it cannot hold the slot.
func (s *Server) serveList(w http.ResponseWriter, client, prefix string) {
	if why := s.takeListing(client); why != "" {
		w.Header().Set("Retry-After", "1")
		http.Error(w, why+"; try again in a second", http.StatusServiceUnavailable)
		return
	}
	defer s.giveListing(client)
	// Where the writer cannot take a deadline (a test's recorder), the
	// server's own WriteTimeout still bounds the listing.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(s.listingTimeout))
	m := s.mem.shared(prefix)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(ExtensionHeader, "1")
	w.WriteHeader(http.StatusOK)
	if _, err := io.WriteString(w, `{"entries":[`); err != nil {
		return
	}
	sep := ""
	for k, v := range m {
		b, err := json.Marshal(listEntry{Key: k, Value: v})
		if err != nil {
			return
		}
		if _, err := io.WriteString(w, sep); err != nil {
			return
		}
		if _, err := w.Write(b); err != nil {
			return // the client went away
		}
		sep = ","
	}
	_, _ = io.WriteString(w, "]}\n")
}

func tooLarge(w http.ResponseWriter) {
	http.Error(w, fmt.Sprintf("value too large: the limit is %d bytes", MaxValueSize), http.StatusRequestEntityTooLarge)
}

func writeText(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg)
}

// HTTPServer is a Server listening on a TCP address. Create it with Listen
// and stop it with Close.
type HTTPServer struct {
	server *Server
	http   *http.Server
	ln     net.Listener
	done   chan struct{} // closed when the serving goroutine returns

	serveErr  error // set by the serving goroutine before done is closed
	closeOnce sync.Once
	closeErr  error
}

// shutdownGrace bounds how long Close waits for requests in flight before it
// cuts their connections.
const shutdownGrace = 5 * time.Second

// Listen starts an embedded metastore on addr (host:port; "127.0.0.1:0"
// picks a free port) and serves it at Path until Close. ctx bounds only the
// listen itself; cancelling it later does not stop the server.
func Listen(ctx context.Context, addr string) (*HTTPServer, error) {
	return ListenWith(ctx, addr, ServerOptions{})
}

// ListenWith is Listen with the quotas of o.
func ListenWith(ctx context.Context, addr string, o ServerOptions) (*HTTPServer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("metastore: listen on %q: %w; another process listens there (another engine's embedded metastore, or ferry metad?): listen on another port (0 picks a free one), or join that metastore as kind \"http\"", addr, err)
		}
		return nil, fmt.Errorf("metastore: listen on %q: %w", addr, err)
	}
	s := NewServerWith(o)
	mux := http.NewServeMux()
	mux.Handle(Path, s)
	h := &HTTPServer{
		server: s,
		http: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       2 * time.Minute,
			// A reader that stalls a listing gives its slot back
			// sooner: listingTimeout.
			WriteTimeout: 2 * time.Minute,
			IdleTimeout:  2 * time.Minute,
		},
		ln:   ln,
		done: make(chan struct{}),
	}
	go func() {
		defer close(h.done)
		if err := h.http.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			h.serveErr = err
		}
	}()
	return h, nil
}

// Addr returns the address the server listens on, with the port it got.
func (h *HTTPServer) Addr() string { return h.ln.Addr().String() }

// URL returns the URL a client uses: http://host:port/metadata.
func (h *HTTPServer) URL() string { return "http://" + h.Addr() + Path }

// Store returns the served map as a Store, for the engine that embeds the
// server (see Server.Store).
func (h *HTTPServer) Store() Backend { return h.server.Store() }

// Close stops accepting connections, lets requests in flight finish for a
// few seconds, then closes every connection, stops the leases and watches
// started through Store, and waits for the goroutines to return. It is safe to call more than once.
func (h *HTTPServer) Close() error {
	h.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		err := h.http.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, h.http.Close())
		}
		<-h.done
		h.server.store.Close()
		if h.serveErr != nil {
			err = errors.Join(err, h.serveErr)
		}
		if err != nil {
			h.closeErr = fmt.Errorf("metastore %s: close: %w", h.URL(), err)
		}
	})
	return h.closeErr
}
