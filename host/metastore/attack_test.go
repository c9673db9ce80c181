package metastore

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// from returns an HTTP client whose connections come from ip, a loopback
// address other than 127.0.0.1: another client, as the server counts
// them.
func from(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	tr := &http.Transport{DialContext: d.DialContext}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// junk PUTs n values of size bytes without a lease from c, and returns
// how many the server took; every refusal must be a 507 that says the
// store is full and what is full.
func junk(t *testing.T, c *http.Client, base, who string, n, size int) int {
	t.Helper()
	val := bytes.Repeat([]byte{'j'}, size)
	took := 0
	for i := 0; i < n; i++ {
		u := base + "?" + url.Values{"key": {fmt.Sprintf("junk/%s/%d", who, i)}}.Encode()
		req, err := http.NewRequest(http.MethodPut, u, bytes.NewReader(val))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			took++
		case resp.StatusCode != http.StatusInsufficientStorage || !strings.Contains(string(body), "metastore full"):
			t.Fatalf("junk PUT %d from %s: %d %q; want 200, or 507 saying the store is full", i, who, resp.StatusCode, body)
		}
	}
	return took
}

// TestJunkCannotFillForEngines is the attack on `ferry metad` and the
// embedded metastore: 32 PUTs of 2 MiB of junk without a lease. Before
// the shares they filled its 64 MiB, and every new engine then failed to
// start, told the server was "not a Mooncake or Ferry metadata server".
// Now the writer is held to its share, and an engine on another address
// opens the store and publishes its descriptor.
func TestJunkCannotFillForEngines(t *testing.T) {
	ctx := context.Background()
	srv, err := Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	took := junk(t, from(t, "127.0.0.2"), srv.URL(), "a", 32, 2<<20)
	if took*(2<<20) > MaxTotalSize/8 {
		t.Fatalf("one client stored %d values of 2 MiB; want at most its share, 1/8 of %d bytes", took, MaxTotalSize)
	}
	b, err := Open(ctx, Options{Kind: KindHTTP, URL: srv.URL()})
	if err != nil {
		t.Fatalf("an engine cannot open the metastore after the junk: %v", err)
	}
	defer b.Close()
	l, err := b.PutLeased(ctx, "ferry/segments/victim", []byte(`{"schema":1}`), time.Minute)
	if err != nil {
		t.Fatalf("an engine cannot publish after the junk: %v", err)
	}
	l.Close(ctx)
}

// TestJunkCannotFillForSignedEngines: with a verifier (the cluster
// secret), eight junk writers on eight addresses fill every share they
// have, and the store's open part with them, but the headroom still takes
// an engine's signed, leased descriptor; the engine opens the store
// (its probe, unsigned, is refused, and taken as a full Ferry server),
// and an unsigned write of its is told the store is full.
func TestJunkCannotFillForSignedEngines(t *testing.T) {
	ctx := context.Background()
	srv, err := ListenWith(ctx, "127.0.0.1:0", ServerOptions{Verify: testVerify})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for i := 2; i < 10; i++ {
		ip := fmt.Sprintf("127.0.0.%d", i)
		junk(t, from(t, ip), srv.URL(), ip, 5, 2<<20)
	}
	srv.server.mem.mu.Lock()
	open := srv.server.mem.open.bytes
	srv.server.mem.mu.Unlock()
	if open > MaxTotalSize*openShare/shareOf || open < MaxTotalSize/2 {
		t.Fatalf("the junk holds %d bytes; want the open part (3/4 of %d) about full", open, MaxTotalSize)
	}
	// Fill the last bytes of the open part from this address too.
	junk(t, from(t, "127.0.0.1"), srv.URL(), "self", 8, 1<<20)
	b, err := Open(ctx, Options{Kind: KindHTTP, URL: srv.URL()})
	if err != nil {
		t.Fatalf("an engine cannot open the full metastore: %v", err)
	}
	defer b.Close()
	l, err := b.PutLeased(ctx, "ferry/segments/victim", []byte(signedPrefix+"descriptor"), time.Minute)
	if err != nil {
		t.Fatalf("the headroom did not take an engine's signed descriptor: %v", err)
	}
	defer l.Close(ctx)
	_, err = b.PutLeased(ctx, "ferry/segments/forged", bytes.Repeat([]byte{'u'}, 1<<20), time.Minute)
	if !errors.Is(err, ErrQuota) || errors.Is(err, ErrNotMetastore) || !strings.Contains(err.Error(), "metastore full") ||
		!strings.Contains(err.Error(), "other than engines' signed, leased descriptors") {
		t.Fatalf("an unsigned write to the full store: %v; want ErrQuota saying what is full", err)
	}
}

// TestFullServerIsNotAnotherServer: a server that answers the probe's
// PUT 507 is a full metastore, and the error says so (ErrQuota, "metastore
// full"), not that it is no metadata server.
func TestFullServerIsNotAnotherServer(t *testing.T) {
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no space left", http.StatusInsufficientStorage)
	}))
	defer hs.Close()
	_, err := Open(context.Background(), Options{Kind: KindHTTP, URL: hs.URL + Path})
	if !errors.Is(err, ErrQuota) || errors.Is(err, ErrNotMetastore) || !strings.Contains(err.Error(), "metastore full") || !strings.Contains(err.Error(), "no space left") {
		t.Fatalf("Open of a full server: %v; want ErrQuota, metastore full, with the server's text", err)
	}
}

// TestUnleasedEntriesExpire: an entry written without a lease expires
// UnleasedTTL after its write, and its room with it; a signed one does
// not.
func TestUnleasedEntriesExpire(t *testing.T) {
	ctx := context.Background()
	srv, err := ListenWith(ctx, "127.0.0.1:0", ServerOptions{UnleasedTTL: 50 * time.Millisecond, Verify: testVerify})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for key, v := range map[string]string{"plain": "junk", "signed": signedPrefix + "descriptor"} {
		if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {key}}, []byte(v)); code != http.StatusOK {
			t.Fatalf("PUT %s: %d %s", key, code, body)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, _ := quotaDo(t, http.MethodGet, srv.URL(), url.Values{"key": {"plain"}}, nil)
		if code == http.StatusNotFound {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an entry without a lease is still there 10s after its 50ms")
		}
		time.Sleep(10 * time.Millisecond) // polling observable state
	}
	if code, body, _ := quotaDo(t, http.MethodGet, srv.URL(), url.Values{"key": {"signed"}}, nil); code != http.StatusOK {
		t.Fatalf("the signed entry: %d %s; want it kept", code, body)
	}
	srv.server.mem.mu.Lock()
	srv.server.mem.lastSweep = time.Time{}
	srv.server.mem.sweepLocked(time.Now())
	u := srv.server.mem.clients["127.0.0.1"]
	srv.server.mem.mu.Unlock()
	if u.keys != 0 || u.bytes != 0 {
		t.Fatalf("the expired entry still counts against its client: %+v", u)
	}
}

// TestSlowListingReadersLoseTheirSlots is the attack that switched
// watches off: connections that ask for a listing and never read it
// held every listing slot (for two minutes, again and again). Now a
// listing that is not read within the listing timeout is cut, and an
// honest client's listing is answered.
func TestSlowListingReadersLoseTheirSlots(t *testing.T) {
	ctx := context.Background()
	srv, err := Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.server.listingTimeout = 3 * time.Second
	// A listing larger than the socket buffers, so that its writer
	// blocks on a client that does not read.
	val := bytes.Repeat([]byte{'v'}, 1<<20)
	for i := 0; i < 12; i++ {
		if err := srv.Store().Put(ctx, fmt.Sprintf("p/%02d", i), val); err != nil {
			t.Fatal(err)
		}
	}
	slots := cap(srv.server.listings)
	for i := 0; i < slots; i++ {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.1.%d", i+1))}}
		conn, err := d.DialContext(ctx, "tcp", srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET %s?prefix=p/ HTTP/1.1\r\nHost: x\r\n\r\n", Path)
		// Read the status line only: the listing has started, and holds
		// its slot while nothing more is read.
		if line, err := bufio.NewReader(conn).ReadString('\n'); err != nil || !strings.Contains(line, "200") {
			t.Fatalf("slow reader %d: %q, %v", i, line, err)
		}
	}
	c, err := NewHTTPClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := c.list(ctx, "p/")
		if err == nil {
			if len(got) != 12 {
				t.Fatalf("listing of %d keys; want 12", len(got))
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listing answered within 20s while %d clients do not read theirs: %v", slots, err)
		}
		time.Sleep(20 * time.Millisecond) // polling observable state
	}
}
