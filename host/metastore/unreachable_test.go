package metastore

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

// TestUnreachable: a Delete against each kind of metastore, stopped after
// the client connected, is Unreachable; an answer that refuses, an absent
// key and nil are not.
func TestUnreachable(t *testing.T) {
	ctx := context.Background()
	stopped := map[string]func(t *testing.T) Store{
		"http": func(t *testing.T) Store {
			hs := httptest.NewServer(NewServer())
			c, err := NewHTTPClient(hs.URL + "/metadata")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if err := c.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			hs.Close()
			return c
		},
		"redis": func(t *testing.T) Store {
			metastoretest.NeedBinary(t, "redis-server", "redis-server")
			s := metastoretest.NewRedis(t)
			r, err := NewRedis(ctx, RedisOptions{Addr: s.Addr})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { r.Close() })
			if err := r.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			s.Stop()
			return r
		},
		"etcd": func(t *testing.T) Store {
			metastoretest.NeedBinary(t, "etcd", "etcd-server")
			s := metastoretest.NewEtcd(t)
			e, err := NewEtcd(ctx, EtcdOptions{Endpoints: []string{s.EtcdEndpoint()}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Close() })
			if err := e.Put(ctx, "k", []byte("v")); err != nil {
				t.Fatal(err)
			}
			s.Stop()
			return e
		},
	}
	for kind, open := range stopped {
		t.Run(kind, func(t *testing.T) {
			st := open(t)
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			err := st.Delete(dctx, "k")
			if err == nil {
				t.Fatal("Delete on a stopped metastore succeeded")
			}
			if !Unreachable(err) {
				t.Errorf("Unreachable(%q) = false; want true", err)
			}
			if !Unreachable(fmt.Errorf("close: %w", errors.Join(errors.New("other"), err))) {
				t.Errorf("Unreachable of the error wrapped and joined = false; want true")
			}
		})
	}

	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "disk on fire", http.StatusInternalServerError)
	}))
	defer refusing.Close()
	c, err := NewHTTPClient(refusing.URL + "/metadata")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	answered := c.Delete(ctx, "k")
	_, absent := NewMemory().Get(ctx, "k")
	for _, err := range []error{nil, answered, absent, errors.New("metastore: something else")} {
		if Unreachable(err) {
			t.Errorf("Unreachable(%v) = true; want false (the metastore answered)", err)
		}
	}
}
