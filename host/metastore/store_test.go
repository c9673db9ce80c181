package metastore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// stores returns every Store implementation, each wired to a fresh backend.
// The HTTP one goes through a real listener on 127.0.0.1; redis and etcd
// are real servers (see backends).
func stores(t *testing.T) map[string]Store {
	t.Helper()
	m := map[string]Store{}
	for name, b := range backends(t) {
		m[name] = b
	}
	return m
}

func TestStoreRoundTrip(t *testing.T) {
	keys := []string{
		"plain",
		"mooncake/ram/engine-a",
		"spaces and ?&=#% signs",
		"unicode-ü-日本",
	}
	values := [][]byte{
		[]byte("v"),
		{0, 1, 2, 0, 255},
		bytes.Repeat([]byte("x"), 1<<20),
		{},
	}
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for i, key := range keys {
				val := values[i%len(values)]
				if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Get(%q) before Put: err = %v, want ErrNotFound", key, err)
				}
				if err := s.Put(ctx, key, val); err != nil {
					t.Fatalf("Put(%q): %v", key, err)
				}
				got, err := s.Get(ctx, key)
				if err != nil {
					t.Fatalf("Get(%q): %v", key, err)
				}
				if !bytes.Equal(got, val) {
					t.Fatalf("Get(%q) = %d bytes, want %d", key, len(got), len(val))
				}
				if err := s.Put(ctx, key, []byte("second")); err != nil {
					t.Fatalf("overwrite %q: %v", key, err)
				}
				if got, _ := s.Get(ctx, key); string(got) != "second" {
					t.Fatalf("after overwrite Get(%q) = %q", key, got)
				}
				if err := s.Delete(ctx, key); err != nil {
					t.Fatalf("Delete(%q): %v", key, err)
				}
				if _, err := s.Get(ctx, key); !errors.Is(err, ErrNotFound) {
					t.Fatalf("Get(%q) after Delete: err = %v, want ErrNotFound", key, err)
				}
				if err := s.Delete(ctx, key); err != nil {
					t.Fatalf("Delete(%q) of an absent key: %v", key, err)
				}
			}
		})
	}
}

func TestStoreKeepsItsOwnCopy(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			v := []byte("abc")
			if err := s.Put(ctx, "k", v); err != nil {
				t.Fatal(err)
			}
			v[0] = 'X'
			got, err := s.Get(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			got[1] = 'Y'
			again, _ := s.Get(ctx, "k")
			if string(again) != "abc" {
				t.Fatalf("stored value changed through caller's slices: %q", again)
			}
		})
	}
}

func TestStoreRejectsEmptyKey(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			for op, err := range map[string]error{
				"Get":    func() error { _, err := s.Get(ctx, ""); return err }(),
				"Put":    s.Put(ctx, "", []byte("v")),
				"Delete": s.Delete(ctx, ""),
			} {
				if err == nil || !strings.Contains(err.Error(), "key must not be empty") {
					t.Errorf("%s with empty key: err = %v", op, err)
				}
			}
		})
	}
}

func TestStoreHonoursCanceledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Get(ctx, "k"); !errors.Is(err, context.Canceled) {
				t.Fatalf("Get with canceled ctx: err = %v, want context.Canceled", err)
			}
		})
	}
}

func TestStoreConcurrentUse(t *testing.T) {
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 20 {
						key := fmt.Sprintf("g%d/k%d", g, i%3)
						val := fmt.Appendf(nil, "%d-%d", g, i)
						if err := s.Put(ctx, key, val); err != nil {
							errs <- err
							return
						}
						got, err := s.Get(ctx, key)
						if err != nil || !bytes.Equal(got, val) {
							errs <- fmt.Errorf("Get(%q) = %q, %v; want %q", key, got, err, val)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func TestMemoryRejectsOversizedValue(t *testing.T) {
	err := NewMemory().Put(context.Background(), "k", make([]byte, MaxValueSize+1))
	if err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Put of MaxValueSize+1 bytes: err = %v", err)
	}
}
