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
	"time"

	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

// quotaDo sends one request to the metastore at base over loopback and
// returns the status and body.
func quotaDo(t *testing.T, method, base string, q url.Values, body []byte) (int, string, http.Header) {
	t.Helper()
	code, b, h := metastoretest.Do(t, method, base, q, body)
	return code, string(b), h
}

// signedPrefix marks the values testVerify takes for engines' signed
// descriptors.
const signedPrefix = "signed:"

func testVerify(_ string, v []byte) bool { return bytes.HasPrefix(v, []byte(signedPrefix)) }

// TestServerTotalQuota fills a real embedded server over HTTP with values
// of the largest size, signed and leased (so that no share applies): the
// write that would pass MaxTotalSize is refused with 507 and a message
// naming the limit, a replacement of a key already counted still fits,
// and a delete makes room again. Before the quota, 400 such values grew
// `ferry metad` without bound.
func TestServerTotalQuota(t *testing.T) {
	srv, err := ListenWith(context.Background(), "127.0.0.1:0", ServerOptions{Verify: testVerify})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	val := append([]byte(signedPrefix), bytes.Repeat([]byte{'x'}, MaxValueSize-len(signedPrefix))...)
	fits := MaxTotalSize / (MaxValueSize + len("k00")) // keys that fit
	lease := url.Values{"ttl_ms": {"60000"}}
	for i := 0; ; i++ {
		key := fmt.Sprintf("k%02d", i)
		code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {key}, "ttl_ms": lease["ttl_ms"]}, val)
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
	if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {"k00"}, "ttl_ms": lease["ttl_ms"]}, val); code != http.StatusOK {
		t.Fatalf("replacing a counted key with a value of the same size: %d %s", code, body)
	}
	if code, body, _ := quotaDo(t, http.MethodDelete, srv.URL(), url.Values{"key": {"k01"}}, nil); code != http.StatusOK {
		t.Fatalf("DELETE: %d %s", code, body)
	}
	if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {"new"}, "ttl_ms": lease["ttl_ms"]}, val); code != http.StatusOK {
		t.Fatalf("PUT after a DELETE made room: %d %s", code, body)
	}
}

// TestServerKeyQuota: past MaxKeys keys, a new key is refused with 507
// (over HTTP with the cap lowered, with signed leased keys that no share
// limits; the store at the real cap below), and a long key with 414.
func TestServerKeyQuota(t *testing.T) {
	srv, err := ListenWith(context.Background(), "127.0.0.1:0", ServerOptions{Verify: testVerify})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	srv.server.mem.maxKeys = 16
	put := func(key string) (int, string) {
		code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {key}, "ttl_ms": {"60000"}}, []byte(signedPrefix+"v"))
		return code, body
	}
	for i := 0; i < 16; i++ {
		if code, body := put(fmt.Sprint(i)); code != http.StatusOK {
			t.Fatalf("PUT %d: %d %s", i, code, body)
		}
	}
	if code, body := put("16"); code != http.StatusInsufficientStorage || !strings.Contains(body, "16 keys, the limit is 16") {
		t.Fatalf("a 17th key: %d %q; want 507 naming the key limit", code, body)
	}
	if code, body := put("2"); code != http.StatusOK {
		t.Fatalf("replacing a key at the key limit: %d %s", code, body)
	}
	long := strings.Repeat("k", MaxKeySize+1)
	if code, body, _ := quotaDo(t, http.MethodPut, srv.URL(), url.Values{"key": {long}}, []byte("v")); code != http.StatusRequestURITooLong || !strings.Contains(body, "limit is 4096") {
		t.Fatalf("a key of %d bytes: %d %q; want 414", len(long), code, body)
	}
}

// TestMemoryKeyQuota: the memory store (this process's writes, which no
// client share limits) takes entries without a lease up to 3/4 of
// MaxKeys, leased ones (the engines' descriptors, without a verifier) up
// to MaxKeys.
func TestMemoryKeyQuota(t *testing.T) {
	ctx := context.Background()
	m := NewMemory()
	defer m.Close()
	open := MaxKeys * openShare / shareOf
	for i := 0; i < open; i++ {
		if err := m.Put(ctx, fmt.Sprint(i), nil); err != nil {
			t.Fatalf("Put %d: %v", i, err)
		}
	}
	err := m.Put(ctx, "one more", nil)
	if !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), `"one more"`) || !strings.Contains(err.Error(), "other than leased entries") {
		t.Fatalf("Put past the headroom: err = %v, want ErrQuota naming the key and the headroom", err)
	}
	var leases []Lease
	for i := open; i < MaxKeys; i++ {
		l, err := m.PutLeased(ctx, fmt.Sprint(i), nil, time.Minute)
		if err != nil {
			t.Fatalf("PutLeased %d, in the headroom: %v", i, err)
		}
		leases = append(leases, l)
	}
	if _, err := m.PutLeased(ctx, "one more", nil, MinLeaseTTL); !errors.Is(err, ErrQuota) || !strings.Contains(err.Error(), "the limit is 16384") {
		t.Fatalf("PutLeased past MaxKeys: err = %v, want ErrQuota naming the key limit", err)
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
	for _, l := range leases {
		l.Close(ctx)
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
