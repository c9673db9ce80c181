package metastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

// quotaDo sends one request to the metastore at base over loopback and
// returns the status and body.
func quotaDo(t *testing.T, method, base string, q url.Values, body []byte) (int, string, http.Header) {
	t.Helper()
	code, b, h := metastoretest.Do(t, method, base, q, body)
	return code, string(b), h
}

// TestServerTotalQuota fills a real embedded server over HTTP with values
// of the largest size: the write that would pass MaxTotalSize is refused
// with 507 and a message naming the limit, a replacement of a key already
// counted still fits, and a delete makes room again. Before the quota, 400
// such values grew `ferry metad` without bound.
func TestServerTotalQuota(t *testing.T) {
	srv, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	val := bytes.Repeat([]byte{'x'}, MaxValueSize)
	fits := MaxTotalSize / (MaxValueSize + len("k00")) // keys that fit
	for i := 0; ; i++ {
		key := fmt.Sprintf("k%02d", i)
		code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {key}}, val)
		if i < fits {
			if code != http.StatusOK {
				t.Fatalf("PUT %d of %d bytes: %d %s; want 200 below the quota", i, len(val), code, body)
			}
			continue
		}
		if code != http.StatusInsufficientStorage || !strings.Contains(body, "limit is 67108864") {
			t.Fatalf("PUT %d, past %d bytes in all: %d %q; want 507 naming the limit", i, MaxTotalSize, code, body)
		}
		if _, ok := srv.server.mem.get(key); ok {
			t.Fatalf("the refused key %q was stored", key)
		}
		break
	}
	if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {"k00"}}, val); code != http.StatusOK {
		t.Fatalf("replacing a counted key with a value of the same size: %d %s", code, body)
	}
	if code, body, _ := quotaDo(t, http.MethodDelete, srv.URL(), url.Values{"key": {"k01"}}, nil); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {"new"}}, val); code != http.StatusOK {
		t.Fatalf("PUT after a DELETE made room: %d %s", code, body)
	}
}

// TestServerKeyQuota: past MaxKeys keys, a new key is refused with 507
// (over HTTP with the cap lowered; the store at the real cap below), and
// a long key with 414.
func TestServerKeyQuota(t *testing.T) {
	srv, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.server.mem.maxKeys = 3
	for i := 0; i < 3; i++ {
		if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {fmt.Sprint(i)}}, []byte("v")); code != http.StatusOK {
			t.Fatalf("PUT %d: %d %s", i, code, body)
		}
	}
	code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {"3"}, "ttl_ms": {"60000"}}, []byte("v"))
	if code != http.StatusInsufficientStorage || !strings.Contains(body, "3 keys, the limit is 3") {
		t.Fatalf("a fourth key: %d %q; want 507 naming the key limit", code, body)
	}
	if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {"2"}}, []byte("w")); code != http.StatusOK {
		t.Fatalf("replacing a key at the key limit: %d %s", code, body)
	}
	long := strings.Repeat("k", MaxKeySize+1)
	if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {long}}, []byte("v")); code != http.StatusRequestURITooLong || !strings.Contains(body, "limit is 4096") {
		t.Fatalf("a key of %d bytes: %d %q; want 414", len(long), code, body)
	}
}

func TestMemoryKeyQuota(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	defer m.Close()
	for i := 0; i < MaxKeys; i++ {
		if err := m.Put(ctx, fmt.Sprint(i), nil); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	err := m.Put(ctx, "one more", nil)
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), `"one more"`) {
		t.Fatalf("Put past MaxKeys: err = %v, want ErrQuota naming the key", err)
	}
	if _, err := m.PutLeased(ctx, "one more", nil, MinLeaseTTL); !errors.Is(err, ErrQuota) {
		t.Fatalf("PutLeased past MaxKeys: err = %v, want ErrQuota", err)
	}
	if err := m.Delete(ctx, "0"); err != nil {
		t.Fatal(err)
	}
	if err := m.Put(ctx, "one more", nil); err != nil {
		t.Fatalf("Put after a Delete made room: %v", err)
	}
	if err := m.Put(ctx, strings.Repeat("k", MaxKeySize+1), nil); err == nil {
		t.Fatal("a key longer than MaxKeySize was stored")
	}
}

// TestServerListingsBounded: with maxListings listings being answered, one
// more is refused with 503 and Retry-After rather than queued, and once
// one ends it is answered in full.
func TestServerListingsBounded(t *testing.T) {
	srv, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	for i := 0; i < 3; i++ {
		_ = srv.server.mem.put(fmt.Sprintf("p/%d", i), []byte{byte(i)})
	}
	for i := 0; i < maxListings; i++ {
		srv.server.listings <- struct{}{} // listings in flight
	}
	code, body, hdr := quotaDo(t, http.MethodGet, srv.URL(), url.Values{"prefix": {"p/"}}, nil)
	if code != http.StatusServiceUnavailable || hdr.Get("Retry-After") == "" || !strings.Contains(body, "limit") {
		t.Fatalf("a listing beyond %d at once: %d %q (Retry-After %q); want 503", maxListings, code, body, hdr.Get("Retry-After"))
	}
	<-srv.server.listings
	c, err := NewHTTPClient(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.list(context.Background(), "p/")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !bytes.Equal(got["p/2"], []byte{2}) {
		t.Fatalf("listing = %v, want the 3 keys", got)
	}
}
