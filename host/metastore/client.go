package metastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
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
	url       string
	base      url.URL
	client    *http.Client
	transport *http.Transport
}

var _ Store = (*HTTPClient)(nil)

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
		return nil
	}
	return c.statusError(http.MethodDelete, key, code, body)
}

// Close closes idle connections. The client must not be used afterwards.
func (c *HTTPClient) Close() error {
	c.transport.CloseIdleConnections()
	return nil
}

func (c *HTTPClient) do(ctx context.Context, method, key string, value []byte) (int, []byte, error) {
	if key == "" {
		return 0, nil, fmt.Errorf("metastore %s: %s: %w", c.url, method, errEmptyKey)
	}
	u := c.base
	u.RawQuery = url.Values{"key": {key}}.Encode()
	var body io.Reader
	if value != nil {
		body = bytes.NewReader(value)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return 0, nil, c.errorf(method, key, err)
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
		return 0, nil, c.errorf(method, key, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxValueSize+1))
	if err != nil {
		return 0, nil, c.errorf(method, key, fmt.Errorf("reading the answer: %w", err))
	}
	if len(data) > MaxValueSize {
		return 0, nil, c.errorf(method, key, fmt.Errorf("answer is larger than the %d-byte limit", MaxValueSize))
	}
	return resp.StatusCode, data, nil
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
	if len(msg) > 200 {
		msg = msg[:200] + "..."
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
	return c.errorf(method, key, cause)
}
