package metastore

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Real redis-server and etcd processes for the tests. A missing binary
// skips the tests that need it, except under CI=true, where it fails them:
// CI must run them (.ci/run installs the packages).

func needBinary(t testing.TB, name, pkg string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := fmt.Sprintf("%s not found in PATH (install the Debian package %s): the tests against a real server cannot run", name, pkg)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// freePort returns a port on 127.0.0.1 that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// server is a child process that can be stopped and started again on the
// same port and with the same data.
type server struct {
	name string
	bin  string
	args []string
	dir  string
	addr string // host:port of the client port
	// ready reports whether the server answers.
	ready func() bool

	mu  sync.Mutex
	cmd *exec.Cmd
}

func (s *server) start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	log, err := os.OpenFile(filepath.Join(s.dir, s.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(s.bin, s.args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", s.name, err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(20 * time.Second)
	for !s.ready() {
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(log.Name())
			t.Fatalf("%s on %s did not become ready in 20s; its log:\n%s", s.name, s.addr, out)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness
	}
}

// stop ends the server with SIGTERM and waits for it.
func (s *server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
	s.cmd = nil
}

// newRedisServer starts redis-server on a free port with no persistence.
func newRedisServer(t testing.TB, extra ...string) *server {
	t.Helper()
	bin := needBinary(t, "redis-server", "redis-server")
	port := freePort(t)
	s := &server{
		name: "redis-server",
		bin:  bin,
		args: append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, extra...),
		dir:  t.TempDir(),
		addr: "127.0.0.1:" + strconv.Itoa(port),
	}
	s.ready = func() bool { return redisPing(s.addr) }
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

// redisPing reports whether a server answers at addr (a password-protected
// one answers with an error, which counts).
func redisPing(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && (strings.HasPrefix(line, "+PONG") || strings.HasPrefix(line, "-NOAUTH"))
}

// newEtcdServer starts a one-member etcd on free ports. Short heartbeat and
// election timeouts make it elect itself, and expire leases, quickly.
func newEtcdServer(t testing.TB) *server {
	t.Helper()
	bin := needBinary(t, "etcd", "etcd-server")
	cport, pport := freePort(t), freePort(t)
	dir := t.TempDir()
	client := "http://127.0.0.1:" + strconv.Itoa(cport)
	peer := "http://127.0.0.1:" + strconv.Itoa(pport)
	s := &server{
		name: "etcd",
		bin:  bin,
		args: []string{
			"--name", "ferry-test",
			"--data-dir", filepath.Join(dir, "data"),
			"--listen-client-urls", client, "--advertise-client-urls", client,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", "ferry-test=" + peer,
			"--heartbeat-interval", "10", "--election-timeout", "100",
			"--log-level", "warn",
		},
		dir:  dir,
		addr: "127.0.0.1:" + strconv.Itoa(cport),
	}
	hc := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	s.ready = func() bool {
		resp, err := hc.Get(client + "/health")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var h struct{ Health string }
		return json.NewDecoder(resp.Body).Decode(&h) == nil && h.Health == "true"
	}
	s.start(t)
	t.Cleanup(s.stop)
	return s
}

func (s *server) etcdEndpoint() string { return "http://" + s.addr }

// Shared servers for the tests that only need a clean store; tests that
// stop or reconfigure a server start their own.
var shared struct {
	mu          sync.Mutex
	redis, etcd *server
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

// sharedRedis returns a client of the package's redis-server, emptied.
func sharedRedis(t *testing.T, opts RedisOptions) *Redis {
	t.Helper()
	needBinary(t, "redis-server", "redis-server")
	shared.mu.Lock()
	s := shared.redis
	shared.mu.Unlock()
	if s == nil {
		s = newRedisServer(sharedTB{t})
		shared.mu.Lock()
		shared.redis = s
		shared.mu.Unlock()
	}
	opts.Addr = s.addr
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
	needBinary(t, "etcd", "etcd-server")
	shared.mu.Lock()
	s := shared.etcd
	shared.mu.Unlock()
	if s == nil {
		s = newEtcdServer(sharedTB{t})
		shared.mu.Lock()
		shared.etcd = s
		shared.mu.Unlock()
	}
	e, err := NewEtcd(context.Background(), EtcdOptions{Endpoints: []string{s.etcdEndpoint()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	if _, err := e.client.Delete(context.Background(), "", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	return e
}
