package metastore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"
)

// DefaultTimeout bounds every request of an HTTPClient, whatever the
// caller's context says: a metastore that does not answer within it is
// treated as down.
const DefaultTimeout = 10 * time.Second

// HTTPClient is a Store backed by an HTTP metastore: Ferry's embedded one or
// Mooncake's HTTP metadata server. Every error names the backend, the
// operation and the key, and wraps the cause. It is safe for concurrent use.
type HTTPClient struct {
	// PollInterval is how often Watch lists its prefix; 0 means
	// DefaultPollInterval. Set it before the first Watch.
	PollInterval time.Duration

	g         *group
	url       string
	base      url.URL
	client    *http.Client
	transport *http.Transport
	dialect   atomic.Int32 // a Dialect, set by Probe
	known     known        // what watches poll on a Mooncake server
}

var _ Backend = (*HTTPClient)(nil)

// NewHTTPClient returns a Store that talks to the metastore at rawURL, for
// example "http://127.0.0.1:7070/metadata". It checks the URL but does not
// connect. The client adds ?key=<key> itself, so rawURL must have no query.
// Requests are bounded by the caller's context and by DefaultTimeout. They
// ignore HTTP_PROXY: a metastore is expected inside the cluster.
func NewHTTPClient(rawURL string) (*HTTPClient, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("metastore %q: invalid URL: %w", rawURL, errors.Unwrap(err))
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, fmt.Errorf("metastore %q: invalid URL: scheme must be http or https, like http://127.0.0.1:7070/metadata", rawURL)
	case u.Host == "":
		return nil, fmt.Errorf("metastore %q: invalid URL: no host; write it like http://127.0.0.1:7070/metadata", rawURL)
	case u.RawQuery != "" || u.ForceQuery:
		return nil, fmt.Errorf("metastore %q: invalid URL: remove the query; the client adds ?key=<key> itself", rawURL)
	case u.Fragment != "":
		return nil, fmt.Errorf("metastore %q: invalid URL: remove the #fragment", rawURL)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	return &HTTPClient{
		url:       rawURL,
		base:      *u,
		client:    &http.Client{Transport: tr, Timeout: DefaultTimeout},
		transport: tr,
		g:         newGroup(),
	}, nil
}

// URL returns the metastore URL the client was created with.
func (c *HTTPClient) URL() string { return c.url }

// Get implements Store.
func (c *HTTPClient) Get(ctx context.Context, key string) ([]byte, error) {
	code, body, err := c.do(ctx, http.MethodGet, key, nil)
	if err != nil {
		return nil, err
	}
	switch code {
	case http.StatusOK:
		c.note(key)
		return body, nil
	case http.StatusNotFound:
		return nil, c.errorf(http.MethodGet, key, ErrNotFound)
	}
	return nil, c.statusError(http.MethodGet, key, code, body)
}

// Put implements Store.
func (c *HTTPClient) Put(ctx context.Context, key string, value []byte) error {
	code, body, err := c.do(ctx, http.MethodPut, key, value)
	if err != nil {
		return err
	}
	if code/100 == 2 {
		c.note(key)
		return nil
	}
	return c.statusError(http.MethodPut, key, code, body)
}

// Delete implements Store. A 404 answer counts as success: Mooncake's server
// answers 404 when the key is already gone.
func (c *HTTPClient) Delete(ctx context.Context, key string) error {
	code, body, err := c.do(ctx, http.MethodDelete, key, nil)
	if err != nil {
		return err
	}
	if code/100 == 2 || code == http.StatusNotFound {
		c.known.remove(key)
		return nil
	}
	return c.statusError(http.MethodDelete, key, code, body)
}

// PutLeased implements Leaser. On Ferry's server it uses the ttl_ms
// extension: the server drops the key ttl after the last PUT, and a
// goroutine of this client PUTs it again every ttl/3. On Mooncake's, which
// keeps keys until they are deleted, the goroutine PUTs the key again
// every ttl/3 and Close deletes it; a process that dies leaves it there
// (see Probe, and docs/mooncake.md).
func (c *HTTPClient) PutLeased(ctx context.Context, key string, value []byte, ttl time.Duration) (Lease, error) {
	if err := checkTTL(ttl); err != nil {
		return nil, c.errorf(http.MethodPut, key, err)
	}
	if key == "" {
		return nil, fmt.Errorf("metastore %s: %s: %w", c.url, http.MethodPut, errEmptyKey)
	}
	d, err := c.ensureDialect(ctx)
	if err != nil {
		return nil, err
	}
	if d == DialectMooncake {
		return c.putLeasedPlain(ctx, key, value, ttl)
	}
	ttlMS := strconv.FormatInt(ttl.Milliseconds(), 10)
	write := func(ctx context.Context, v []byte) error {
		code, body, hdr, err := c.doQuery(ctx, http.MethodPut, key, url.Values{"key": {key}, "ttl_ms": {ttlMS}}, v, MaxValueSize)
		if err != nil {
			return err
		}
		if code/100 != 2 {
			return c.statusError(http.MethodPut, key, code, body)
		}
		if hdr.Get(ExtensionHeader) == "" {
			_ = c.Delete(ctx, key)
			return c.errorf(http.MethodPut, key, errNoExtension)
		}
		return nil
	}
	return startLease(ctx, c.g, fmt.Sprintf("metastore %s: lease on key %q", c.url, key), value, ttl, keeper{
		write:  write,
		remove: func(ctx context.Context) error { return c.Delete(ctx, key) },
	})
}

var errNoExtension = errors.New("the server no longer answers Ferry's extensions (ttl_ms, prefix listing), as it did when probed; has another server taken its address? Restart the engine to probe it again")

// maxListSize bounds the answer to a prefix listing.
const maxListSize = 256 << 20

// Watch implements Watcher by listing prefix every PollInterval with
// Ferry's ?prefix= extension. After a failed listing it sends Resync once
// the server answers again. A Mooncake server cannot list: there the watch
// GETs, every PollInterval, each key under prefix that this client has
// read, written or leased (at most maxKnownKeys), so it follows the
// segments the engine opened and its own key, not keys it never named.
func (c *HTTPClient) Watch(ctx context.Context, prefix string) (<-chan Event, error) {
	d, err := c.ensureDialect(ctx)
	if err != nil {
		return nil, err
	}
	list := c.list
	if d == DialectMooncake {
		list = c.listKnown
	}
	return pollWatch(ctx, c.g, prefix, c.PollInterval, list, nil, nil)
}

func (c *HTTPClient) list(ctx context.Context, prefix string) (map[string][]byte, error) {
	op := "LIST"
	code, body, hdr, err := c.doQuery(ctx, http.MethodGet, prefix, url.Values{"prefix": {prefix}}, nil, maxListSize)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, c.statusError(op, prefix, code, body)
	}
	if hdr.Get(ExtensionHeader) == "" {
		return nil, c.errorf(op, prefix, errNoExtension)
	}
	var ans listAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		return nil, c.errorf(op, prefix, fmt.Errorf("decoding the listing: %w", err))
	}
	m := make(map[string][]byte, len(ans.Entries))
	for _, e := range ans.Entries {
		if e.Value == nil {
			e.Value = []byte{}
		}
		m[e.Key] = e.Value
	}
	return m, nil
}

// Close stops the client's leases (their keys expire on Ferry's server
// within their ttl; on Mooncake's, which never expires them, Close deletes
// them) and watches, and closes idle connections. The client must not be
// used afterwards.
func (c *HTTPClient) Close() error {
	c.g.close()
	if c.Dialect() == DialectMooncake {
		c.dropLeased()
	}
	c.transport.CloseIdleConnections()
	return nil
}

func (c *HTTPClient) do(ctx context.Context, method, key string, value []byte) (int, []byte, error) {
	if key == "" {
		return 0, nil, fmt.Errorf("metastore %s: %s: %w", c.url, method, errEmptyKey)
	}
	code, body, _, err := c.doQuery(ctx, method, key, url.Values{"key": {key}}, value, MaxValueSize)
	return code, body, err
}

// doQuery sends one request; key only names the request in errors.
func (c *HTTPClient) doQuery(ctx context.Context, method, key string, q url.Values, value []byte, limit int64) (int, []byte, http.Header, error) {
	if k, ok := q["key"]; ok && (len(k) == 0 || k[0] == "") {
		return 0, nil, nil, fmt.Errorf("metastore %s: %s: %w", c.url, method, errEmptyKey)
	}
	u := c.base
	u.RawQuery = q.Encode()
	var body io.Reader
	if value != nil {
		body = bytes.NewReader(value)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return 0, nil, nil, c.errorf(method, key, err)
	}
	if method == http.MethodPut {
		req.Header.Set("Content-Type", "application/octet-stream")
		if value == nil {
			req.ContentLength = 0
			req.Body = http.NoBody
		}
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, nil, noAnswer{c.errorf(method, key, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return 0, nil, nil, c.errorf(method, key, fmt.Errorf("reading the answer: %w", err))
	}
	if int64(len(data)) > limit {
		return 0, nil, nil, c.errorf(method, key, fmt.Errorf("answer is larger than the %d-byte limit", limit))
	}
	return resp.StatusCode, data, resp.Header, nil
}

// errorf wraps cause with the backend, operation and key. net/http's
// *url.Error repeats the whole URL; its inner error says the same with less
// noise, so it is unwrapped.
func (c *HTTPClient) errorf(method, key string, cause error) error {
	var ue *url.Error
	if errors.As(cause, &ue) {
		cause = ue.Err
	}
	hint := ""
	if errors.Is(cause, syscall.ECONNREFUSED) {
		hint = " (is a metastore running there? check metastore.url in the config)"
	}
	return fmt.Errorf("metastore %s: %s key %q: %w%s", c.url, method, key, cause, hint)
}

func (c *HTTPClient) statusError(method, key string, code int, body []byte) error {
	msg := strings.TrimSpace(string(body))
	if len(msg) > 400 {
		msg = msg[:400] + "..."
	}
	msg = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return '?'
	}, msg)
	cause := fmt.Errorf("server answered %d %s", code, http.StatusText(code))
	if msg != "" {
		cause = fmt.Errorf("%w: %s", cause, msg)
	}
	if code == http.StatusInsufficientStorage {
		// Ferry's server says which quota; another server's text is
		// kept as it came.
		cause = fmt.Errorf("%w (%w); free room there (see its message), or point metastore.url at a metastore of this cluster's own", ErrQuota, cause)
	}
	return c.errorf(method, key, cause)
}

// noAnswer marks an HTTP request the metastore did not answer: the
// client found no connection, or lost it before the answer (net/http's
// "server closed idle connection" among others). Unreachable reads it.
type noAnswer struct{ error }

func (e noAnswer) Unwrap() error { return e.error }
