package metastore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Dialect says which protocol an HTTP metastore speaks, as
// HTTPClient.Probe found it.
type Dialect int32

const (
	// DialectUnknown: not probed yet.
	DialectUnknown Dialect = iota
	// DialectFerry: Ferry's embedded metastore or `ferry metad`, with
	// leases (ttl_ms) and prefix listings.
	DialectFerry
	// DialectMooncake: a server that speaks only Mooncake's protocol (GET,
	// PUT and DELETE on ?key=): Mooncake's http-metadata-server (Go), its
	// Python mooncake_http_metadata_server, or the C++ one in
	// mooncake-store. Keys never expire there.
	DialectMooncake
)

func (d Dialect) String() string {
	switch d {
	case DialectFerry:
		return "ferry"
	case DialectMooncake:
		return "mooncake"
	}
	return "unknown"
}

// ErrNotMetastore is returned, wrapped, by Probe (and so by Open with
// KindHTTP) when the server at the URL answers, but not as a metadata
// server does. Test for it with errors.Is.
var ErrNotMetastore = errors.New("not a Mooncake or Ferry metadata server")

// probePrefix is where Probe writes its test key.
const probePrefix = "ferry-probe/"

// expected is what Probe's errors say a metadata server does.
const expected = "a metadata server stores the body of PUT <url>?key=K, returns it to GET <url>?key=K with 200, " +
	"and answers GET of an absent key with 404 (Mooncake's http-metadata-server or mooncake_http_metadata_server, " +
	"or Ferry's: ferry metad, or an engine's embedded metastore); check metastore.url (its path is usually " + Path + ")"

// Dialect returns what Probe found, DialectUnknown before it ran.
func (c *HTTPClient) Dialect() Dialect { return Dialect(c.dialect.Load()) }

// Probe finds out what the server at the client's URL is, and remembers
// it. It PUTs a test key under "ferry-probe/" (with Ferry's ttl_ms, which
// Mooncake's servers ignore), GETs it back, DELETEs it and GETs it again.
// A server that does all four and marks the PUT's answer with Ferry's
// extension header is Ferry's; one that does all four without it is taken
// for Mooncake's, and the client then keeps its leases by re-putting keys
// and its watches by polling the keys it knows. A server that fails a step
// gets an error wrapping ErrNotMetastore that names the URL, the step,
// what the server answered and what was expected; an unreachable one
// gets the request's error. A server that answers the PUT 507 is full,
// not something else: Ferry's (its extension header on the answer) is
// taken as it is, since its headroom may still take an engine's signed
// descriptor; another gets an error wrapping ErrQuota. Open with KindHTTP probes; PutLeased and
// Watch probe a client that has not been probed.
func (c *HTTPClient) Probe(ctx context.Context) (Dialect, error) {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	key := probePrefix + hex.EncodeToString(nonce[:])
	value := []byte("ferry metastore probe " + key)
	step := func(method string) string { return method + " ?key=" + key }
	code, body, hdr, err := c.doQuery(ctx, http.MethodPut, key, url.Values{"key": {key}, "ttl_ms": {probeTTL}}, value, MaxValueSize)
	if err != nil {
		return DialectUnknown, err
	}
	if code == http.StatusInsufficientStorage {
		if hdr.Get(ExtensionHeader) != "" {
			// Ferry's server, full for this client's entries: its
			// headroom may still take an engine's signed descriptor,
			// so the store is usable; a write it refuses says why.
			c.dialect.Store(int32(DialectFerry))
			return DialectFerry, nil
		}
		return DialectUnknown, c.statusError(http.MethodPut, key, code, body)
	}
	if code/100 != 2 {
		return DialectUnknown, c.notMetastore(step("PUT"), code, hdr, body, "200")
	}
	d := DialectMooncake
	if hdr.Get(ExtensionHeader) != "" {
		d = DialectFerry
	}
	code, body, hdr, err = c.doQuery(ctx, http.MethodGet, key, url.Values{"key": {key}}, nil, MaxValueSize)
	if err == nil && (code != http.StatusOK || string(body) != string(value)) {
		err = c.notMetastore(step("GET"), code, hdr, body, fmt.Sprintf("200 with the %d bytes just PUT", len(value)))
	}
	if err != nil {
		c.forget(key)
		return DialectUnknown, err
	}
	code, body, hdr, err = c.doQuery(ctx, http.MethodDelete, key, url.Values{"key": {key}}, nil, MaxValueSize)
	if err != nil {
		return DialectUnknown, err
	}
	if code/100 != 2 && code != http.StatusNotFound {
		return DialectUnknown, c.notMetastore(step("DELETE"), code, hdr, body, "200")
	}
	code, body, hdr, err = c.doQuery(ctx, http.MethodGet, key, url.Values{"key": {key}}, nil, MaxValueSize)
	if err != nil {
		return DialectUnknown, err
	}
	if code != http.StatusNotFound {
		return DialectUnknown, c.notMetastore(step("GET")+" after its DELETE", code, hdr, body, "404")
	}
	c.dialect.Store(int32(d))
	return d, nil
}

// probeTTL is the lease of Probe's key on Ferry's server, should the probe
// stop before its DELETE.
const probeTTL = "60000"

// forget deletes a probe key, best effort, when the server has shown that
// it is no metadata server.
func (c *HTTPClient) forget(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _, _, _ = c.doQuery(ctx, http.MethodDelete, key, url.Values{"key": {key}}, nil, 1<<10)
}

func (c *HTTPClient) notMetastore(step string, code int, hdr http.Header, body []byte, want string) error {
	got := fmt.Sprintf("%d %s", code, http.StatusText(code))
	if ct := hdr.Get("Content-Type"); ct != "" {
		got += " (" + ct + ")"
	}
	if msg := excerpt(body); msg != "" {
		got += fmt.Sprintf(" %q", msg)
	}
	return fmt.Errorf("metastore %s: %w: %s answered %s; expected %s: %s", c.url, ErrNotMetastore, step, got, want, expected)
}

// ensureDialect probes a client that has not been probed.
func (c *HTTPClient) ensureDialect(ctx context.Context) (Dialect, error) {
	if d := c.Dialect(); d != DialectUnknown {
		return d, nil
	}
	return c.Probe(ctx)
}

// maxKnownKeys bounds the keys a client watches on a Mooncake server.
const maxKnownKeys = 4096

// known is what a client watches on a server without listings: the keys
// it has read, written or leased, at most maxKnownKeys.
type known struct {
	mu     sync.Mutex
	keys   map[string]struct{}
	leased map[string]int // keys of live leases on a Mooncake server
}

func (k *known) add(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.keys == nil {
		k.keys = make(map[string]struct{})
	}
	if len(k.keys) < maxKnownKeys {
		k.keys[key] = struct{}{}
	}
}

func (k *known) remove(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.keys, key)
}

func (k *known) under(prefix string) []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for key := range k.keys {
		if strings.HasPrefix(key, prefix) {
			out = append(out, key)
		}
	}
	return out
}

func (k *known) lease(key string, d int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.leased == nil {
		k.leased = make(map[string]int)
	}
	if k.leased[key] += d; k.leased[key] <= 0 {
		delete(k.leased, key)
	}
}

func (k *known) leasedKeys() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := make([]string, 0, len(k.leased))
	for key := range k.leased {
		out = append(out, key)
	}
	return out
}

// note records key for the polling watches of a Mooncake server.
func (c *HTTPClient) note(key string) {
	if c.Dialect() != DialectFerry {
		c.known.add(key)
	}
}

// putLeasedPlain is PutLeased on a Mooncake server: keys never expire
// there, so the lease PUTs the value again every ttl/3 (which also puts
// back a key that someone deleted) and DELETEs it on Close, or when the
// client is closed. A process that dies leaves its key behind.
func (c *HTTPClient) putLeasedPlain(ctx context.Context, key string, value []byte, ttl time.Duration) (Lease, error) {
	if strings.Contains(key, "rpc_meta") {
		return nil, c.errorf(http.MethodPut, key, errors.New(`Mooncake's metadata servers refuse to replace a key that contains "rpc_meta", so it cannot be leased there: pick a name or key_prefix without it`))
	}
	put := func(ctx context.Context, v []byte) error { return c.Put(ctx, key, v) }
	c.known.lease(key, 1)
	var once sync.Once
	drop := func() { once.Do(func() { c.known.lease(key, -1) }) }
	l, err := startLease(ctx, c.g, fmt.Sprintf("metastore %s: lease on key %q", c.url, key), value, ttl, keeper{
		write: put,
		remove: func(ctx context.Context) error {
			drop()
			return c.Delete(ctx, key)
		},
	})
	if err != nil {
		drop()
		return nil, err
	}
	return l, nil
}

// closeTimeout bounds the deletes of Close on a Mooncake server.
const closeTimeout = 2 * time.Second

// dropLeased deletes, best effort, the keys of leases still live when a
// client of a Mooncake server is closed: nothing would ever expire them.
func (c *HTTPClient) dropLeased() {
	keys := c.known.leasedKeys()
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	for _, k := range keys {
		_ = c.Delete(ctx, k)
	}
}

// listKnown is the lister of a watch on a Mooncake server, which cannot
// list: it GETs each key under prefix that this client has read, written
// or leased. One failed GET fails the listing (the watch then resyncs).
func (c *HTTPClient) listKnown(ctx context.Context, prefix string) (map[string][]byte, error) {
	keys := c.known.under(prefix)
	m := make(map[string][]byte, len(keys))
	for _, k := range keys {
		code, body, _, err := c.doQuery(ctx, http.MethodGet, k, url.Values{"key": {k}}, nil, MaxValueSize)
		if err != nil {
			return nil, err
		}
		switch code {
		case http.StatusOK:
			m[k] = body
		case http.StatusNotFound:
		default:
			return nil, c.statusError(http.MethodGet, k, code, body)
		}
	}
	return m, nil
}

func excerpt(body []byte) string {
	msg := strings.TrimSpace(string(body))
	if len(msg) > 120 {
		msg = msg[:120] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, msg)
}
