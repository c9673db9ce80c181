package metastore

import (
	"context"
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
//	PUT    <path>?key=K   body is the value; 200; 413 beyond MaxValueSize
//	DELETE <path>?key=K   200; 404 when absent (as Mooncake answers)
//
// An empty or missing key answers 400; any other method answers 405 with an
// Allow header. Server does not look at the request path, so it can be
// mounted anywhere; Listen mounts it at Path. The zero value is not usable:
// call NewServer.
type Server struct {
	mem *memory
}

// NewServer returns an empty Server. Its map lives as long as the Server.
func NewServer() *Server {
	return &Server{mem: &memory{m: make(map[string][]byte)}}
}

// Store returns the server's map as a Store, so that the engine that embeds
// the server reads and writes it without a round trip through HTTP. Closing
// the returned Store does nothing.
func (s *Server) Store() Store { return s.mem }

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
	key := r.URL.Query().Get("key")
	if key == "" {
		http.Error(w, "missing key: use ?key=<key>", http.StatusBadRequest)
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
		s.mem.put(key, v)
		writeText(w, http.StatusOK, "metadata updated")

	case http.MethodDelete:
		if !s.mem.delete(key) {
			http.Error(w, "metadata not found", http.StatusNotFound)
			return
		}
		writeText(w, http.StatusOK, "metadata deleted")
	}
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
			IdleTimeout:       2 * time.Minute,
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
func (h *HTTPServer) Store() Store { return h.server.Store() }

// Close stops accepting connections, lets requests in flight finish for a
// few seconds, then closes every connection and waits for the serving
// goroutine to return. It is safe to call more than once.
func (h *HTTPServer) Close() error {
	h.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		err := h.http.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, h.http.Close())
		}
		<-h.done
		if h.serveErr != nil {
			err = errors.Join(err, h.serveErr)
		}
		if err != nil {
			h.closeErr = fmt.Errorf("metastore %s: close: %w", h.URL(), err)
		}
	})
	return h.closeErr
}
