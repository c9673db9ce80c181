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
//	                      507 past MaxKeys keys or MaxTotalSize bytes
//	DELETE <path>?key=K   200; 404 when absent (as Mooncake answers)
//
// Ferry adds two extensions that Mooncake's clients never send:
//
//	PUT <path>?key=K&ttl_ms=N   the key expires N ms after this PUT unless
//	                            PUT again (a lease; see HTTPClient.PutLeased)
//	GET <path>?prefix=P         200 with a JSON object {"entries": [{"key":
//	                            K, "value": base64}, ...]} of every live key
//	                            under P (for polling watchers); at
//	                            most maxListings at once, 503 beyond
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
}

// maxListings bounds the prefix listings answered at once. A listing is
// written entry by entry from the map's own values, so each holds at most
// the store (MaxTotalSize) alive and one entry's encoding.
const maxListings = 4

// NewServer returns an empty Server. Its map lives as long as the Server.
func NewServer() *Server {
	m := newMemory()
	return &Server{mem: m, store: newMemStore(m), listings: make(chan struct{}, maxListings)}
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
		s.serveList(w, q.Get("prefix"))
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
			if err := s.mem.putTTL(key, v, time.Duration(ms)*time.Millisecond); err != nil {
				http.Error(w, err.Error(), http.StatusInsufficientStorage)
				return
			}
			w.Header().Set(ExtensionHeader, "1")
		} else if err := s.mem.put(key, v); err != nil {
			http.Error(w, err.Error(), http.StatusInsufficientStorage)
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

// serveList writes the listAnswer of prefix one entry at a time, so that
// answering it costs one entry's encoding beyond the map.
func (s *Server) serveList(w http.ResponseWriter, prefix string) {
	select {
	case s.listings <- struct{}{}:
		defer func() { <-s.listings }()
	default:
		w.Header().Set("Retry-After", "1")
		http.Error(w, fmt.Sprintf("busy: %d prefix listings are being answered, the limit; try again in a second", maxListings), http.StatusServiceUnavailable)
		return
	}
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
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metastore: listen on %q: %w", addr, err)
	}
	s := NewServer()
	mux := http.NewServeMux()
	mux.Handle(Path, s)
	h := &HTTPServer{
		server: s,
		http: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       2 * time.Minute,
			// A reader that stalls a listing gives its slot back.
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
