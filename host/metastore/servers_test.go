package metastore

import (
	"context"
	"os"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

// Shared servers for the tests that only need a clean store; tests that
// stop or reconfigure a server start their own.
var shared struct {
	mu          sync.Mutex
	redis, etcd *metastoretest.Server
	cleanups    []func()
}

type sharedTB struct {
	testing.TB
}

// Cleanup defers to the end of the package run.
func (s sharedTB) Cleanup(f func()) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.cleanups = append(shared.cleanups, f)
}

func (s sharedTB) TempDir() string {
	dir, err := os.MkdirTemp("", "ferry-metastore-test-")
	if err != nil {
		s.Fatal(err)
	}
	s.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func stopShared() {
	shared.mu.Lock()
	fs := shared.cleanups
	shared.cleanups = nil
	shared.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// listenLocal serves a metastore on a free port of 127.0.0.1 until the
// test ends.
func listenLocal(t *testing.T) *HTTPServer {
	t.Helper()
	srv, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// sharedServer returns *s, starting it with start on first use; it lives
// until stopShared.
func sharedServer(t *testing.T, s **metastoretest.Server, start func(testing.TB) *metastoretest.Server) *metastoretest.Server {
	t.Helper()
	shared.mu.Lock()
	srv := *s
	shared.mu.Unlock()
	if srv == nil {
		srv = start(sharedTB{t})
		shared.mu.Lock()
		*s = srv
		shared.mu.Unlock()
	}
	return srv
}

// sharedRedis returns a client of the package's redis-server, emptied.
func sharedRedis(t *testing.T, opts RedisOptions) *Redis {
	t.Helper()
	metastoretest.NeedBinary(t, "redis-server", "redis-server")
	opts.Addr = sharedServer(t, &shared.redis, func(t testing.TB) *metastoretest.Server { return metastoretest.NewRedis(t) }).Addr
	r, err := NewRedis(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	if err := r.client.FlushDB(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	return r
}

// sharedEtcd returns a client of the package's etcd, emptied.
func sharedEtcd(t *testing.T) *Etcd {
	t.Helper()
	metastoretest.NeedBinary(t, "etcd", "etcd-server")
	s := sharedServer(t, &shared.etcd, metastoretest.NewEtcd)
	e, err := NewEtcd(context.Background(), EtcdOptions{Endpoints: []string{s.EtcdEndpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if _, err := e.client.Delete(context.Background(), "", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	return e
}
