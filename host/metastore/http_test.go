package metastore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestServerProtocol(t *testing.T) {
	s := NewServer()
	s.mem.put("present", []byte("value"))
	tests := []struct {
		name       string
		method     string
		target     string
		body       io.Reader
		wantCode   int
		wantBody   string // substring
		wantHeader map[string]string
	}{
		{"get present", "GET", "/metadata?key=present", nil, 200, "value", nil},
		{"get absent", "GET", "/metadata?key=absent", nil, 404, "metadata not found", nil},
		{"get without key", "GET", "/metadata", nil, 400, "missing key", nil},
		{"get empty key", "GET", "/metadata?key=", nil, 400, "missing key", nil},
		{"put", "PUT", "/metadata?key=new", strings.NewReader("v"), 200, "metadata updated", nil},
		{"put empty key", "PUT", "/metadata?key=", strings.NewReader("v"), 400, "missing key", nil},
		{"delete absent", "DELETE", "/metadata?key=absent", nil, 404, "metadata not found", nil},
		{"post", "POST", "/metadata?key=k", strings.NewReader("v"), 405, "method not allowed",
			map[string]string{"Allow": "GET, PUT, DELETE"}},
		{"head", "HEAD", "/metadata?key=present", nil, 405, "",
			map[string]string{"Allow": "GET, PUT, DELETE"}},
		{"put too large, length known", "PUT", "/metadata?key=big",
			bytes.NewReader(make([]byte, MaxValueSize+1)), 413, "value too large", nil},
		{"put too large, chunked", "PUT", "/metadata?key=big",
			io.LimitReader(zeros{}, MaxValueSize+1), 413, "value too large", nil},
		{"put at the limit", "PUT", "/metadata?key=limit",
			bytes.NewReader(make([]byte, MaxValueSize)), 200, "metadata updated", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(tt.method, tt.target, tt.body)
			if _, ok := tt.body.(*io.LimitedReader); ok {
				req.ContentLength = -1 // as with Transfer-Encoding: chunked
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != tt.wantCode {
				t.Fatalf("status = %d, want %d (body %q)", rec.Code, tt.wantCode, rec.Body.String())
			}
			if !strings.Contains(rec.Body.String(), tt.wantBody) {
				t.Errorf("body = %q, want it to contain %q", rec.Body.String(), tt.wantBody)
			}
			for k, v := range tt.wantHeader {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
	if _, ok := s.mem.get("big"); ok {
		t.Error("an oversized PUT was stored")
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestMooncakeClientView drives the listener with plain HTTP, as Mooncake's
// C++ client does, and checks the answers it relies on.
func TestMooncakeClientView(t *testing.T) {
	srv := listenLocal(t)
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") || !strings.HasSuffix(srv.URL(), "/metadata") {
		t.Fatalf("URL() = %q", srv.URL())
	}
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	do := func(method, url, body string) (int, string) {
		t.Helper()
		return httpDoWith(t, hc, method, url, body)
	}
	steps := []struct {
		method, url, body string
		code              int
		want              string
	}{
		{"PUT", srv.URL() + "?key=mooncake%2Fram%2Fa", `{"name":"a"}`, 200, "metadata updated"},
		{"GET", srv.URL() + "?key=mooncake/ram/a", "", 200, `{"name":"a"}`},
		{"DELETE", srv.URL() + "?key=mooncake/ram/a", "", 200, "metadata deleted"},
		{"GET", srv.URL() + "?key=mooncake/ram/a", "", 404, "metadata not found\n"},
		{"DELETE", srv.URL() + "?key=mooncake/ram/a", "", 404, "metadata not found\n"},
		{"GET", "http://" + srv.Addr() + "/other?key=a", "", 404, ""},
	}
	for i, s := range steps {
		code, body := do(s.method, s.url, s.body)
		if code != s.code || (s.want != "" && body != s.want) {
			t.Errorf("step %d %s %s: got %d %q, want %d %q", i, s.method, s.url, code, body, s.code, s.want)
		}
	}
}

func TestHTTPServerCloseIsIdempotent(t *testing.T) {
	srv, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := srv.Addr()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Close", addr)
	}
}

func TestListenErrors(t *testing.T) {
	srv := listenLocal(t)
	for _, addr := range []string{srv.Addr(), "not-an-address", "127.0.0.1:99999"} {
		s, err := Listen(context.Background(), addr)
		if err == nil {
			s.Close()
			t.Errorf("Listen(%q) succeeded", addr)
			continue
		}
		if !strings.Contains(err.Error(), addr) {
			t.Errorf("Listen(%q): error %q does not name the address", addr, err)
		}
	}
}

func TestNewHTTPClientValidatesURL(t *testing.T) {
	tests := []struct {
		url  string
		want string // substring of the error; "" means valid
	}{
		{"http://127.0.0.1:7070/metadata", ""},
		{"https://metastore.example:443/metadata", ""},
		{"http://[::1]:7070/metadata", ""},
		{"", "scheme must be http or https"},
		{"127.0.0.1:7070/metadata", "invalid URL"},
		{"localhost:7070", "scheme must be http or https"},
		{"ftp://host/metadata", "scheme must be http or https"},
		{"http:///metadata", "no host"},
		{"http://host:1/metadata?key=x", "remove the query"},
		{"http://host:1/metadata?", "remove the query"},
		{"http://host:1/metadata#frag", "remove the #fragment"},
		{"http://host:1/%zz", "invalid URL"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			c, err := NewHTTPClient(tt.url)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if c.URL() != tt.url {
					t.Errorf("URL() = %q", c.URL())
				}
				c.Close()
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("no error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "metastore") {
				t.Errorf("error %q, want it to contain %q and name the metastore", err, tt.want)
			}
		})
	}
}

// closedPort returns a 127.0.0.1 address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestHTTPClientUnreachable(t *testing.T) {
	url := "http://" + closedPort(t) + "/metadata"
	c, err := NewHTTPClient(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Get(ctx, "x")
	if err == nil {
		t.Fatal("Get on a closed port succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("failing took %v; a refused connection should fail at once", d)
	}
	for _, want := range []string{"metastore " + url, `GET key "x"`, "connection refused", "is a metastore running there?"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("errors.Is(err, ECONNREFUSED) = false for %v", err)
	}
	if errors.Is(err, ErrNotFound) {
		t.Error("an unreachable metastore reported ErrNotFound")
	}
}

func TestHTTPClientDeadline(t *testing.T) {
	// The handler holds the request until the client gives up, so the
	// deadline, not the server, ends the call.
	release := make(chan struct{})
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hs.Close()
	defer close(release) // runs first: Close waits for the handler
	c, err := NewHTTPClient(hs.URL + "/metadata")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = c.Put(ctx, "k", []byte("v"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want context.DeadlineExceeded", err)
	}
	if !strings.Contains(err.Error(), `PUT key "k"`) {
		t.Errorf("error %q does not name the operation", err)
	}
}

func TestHTTPClientServerErrors(t *testing.T) {
	tests := []struct {
		name    string
		code    int
		body    string
		op      func(*HTTPClient) error
		wantErr string // "" means success
	}{
		{"get 500", 500, "disk on fire\n", func(c *HTTPClient) error { _, err := c.Get(context.Background(), "k"); return err },
			`GET key "k": server answered 500 Internal Server Error: disk on fire`},
		{"put 413", 413, "value too large", func(c *HTTPClient) error { return c.Put(context.Background(), "k", []byte("v")) },
			`PUT key "k": server answered 413 Request Entity Too Large: value too large`},
		{"put 201", 201, "", func(c *HTTPClient) error { return c.Put(context.Background(), "k", nil) }, ""},
		{"delete 404", 404, "metadata not found", func(c *HTTPClient) error { return c.Delete(context.Background(), "k") }, ""},
		{"delete 503", 503, "", func(c *HTTPClient) error { return c.Delete(context.Background(), "k") },
			`DELETE key "k": server answered 503 Service Unavailable`},
		{"binary body", 500, "\x00\x01bad", func(c *HTTPClient) error { _, err := c.Get(context.Background(), "k"); return err },
			"server answered 500 Internal Server Error: ??bad"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(tt.code)
				io.WriteString(w, tt.body)
			}))
			defer hs.Close()
			c, err := NewHTTPClient(hs.URL + "/metadata")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = tt.op(c)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "metastore "+hs.URL+"/metadata: ") {
				t.Errorf("error %q does not start with the backend", err)
			}
		})
	}
}

// An HTTP metastore that answers a GET with more than MaxValueSize bytes
// (a hostile or broken server, streaming for ever) is refused after
// MaxValueSize+1 bytes are read; an answer of MaxValueSize is taken.
func TestHTTPClientAnswerCapped(t *testing.T) {
	for _, c := range []struct {
		name string
		body io.Reader
		want string // "" for success
	}{
		{"at the cap", bytes.NewReader(make([]byte, MaxValueSize)), ""},
		{"one over", bytes.NewReader(make([]byte, MaxValueSize+1)), "answer is larger than the 4194304-byte limit"},
		{"endless", zeros{}, "answer is larger than the 4194304-byte limit"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(w, c.body) // an endless body ends when the client hangs up
			}))
			defer hs.Close()
			cl, err := NewHTTPClient(hs.URL + "/metadata")
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			v, err := cl.Get(context.Background(), "k")
			switch {
			case c.want == "" && (err != nil || len(v) != MaxValueSize):
				t.Fatalf("Get = %d bytes, %v; want %d", len(v), err, MaxValueSize)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("Get = %d bytes, %v; want an error saying %q", len(v), err, c.want)
			}
		})
	}
}
