package metastoretest

import (
	"bufio"
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
)

// NeedBinary returns the path of name, or skips (fails under CI=true) the
// test with the Debian package to install.
func NeedBinary(t testing.TB, name, pkg string) string {
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

// FreePort returns a port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Server is a child process that can be stopped and started again on the
// same port and with the same data.
type Server struct {
	name string
	bin  string
	args []string
	dir  string
	Addr string // host:port of the client port
	// ready reports whether the server answers.
	ready func() bool

	mu  sync.Mutex
	cmd *exec.Cmd
}

func (s *Server) Start(t testing.TB) {
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
			t.Fatalf("%s on %s did not become ready in 20s; its log:\n%s", s.name, s.Addr, out)
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness
	}
}

// Stop ends the server with SIGTERM and waits for it.
func (s *Server) Stop() {
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

// NewRedis starts redis-server on a free port with no persistence.
func NewRedis(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin := NeedBinary(t, "redis-server", "redis-server")
	port := FreePort(t)
	s := &Server{
		name: "redis-server",
		bin:  bin,
		args: append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"}, extra...),
		dir:  t.TempDir(),
		Addr: "127.0.0.1:" + strconv.Itoa(port),
	}
	s.ready = func() bool { return redisPing(s.Addr) }
	s.Start(t)
	t.Cleanup(s.Stop)
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

// NewEtcd starts a one-member etcd on free ports. Short heartbeat and
// election timeouts make it elect itself, and expire leases, quickly.
func NewEtcd(t testing.TB) *Server {
	t.Helper()
	bin := NeedBinary(t, "etcd", "etcd-server")
	cport, pport := FreePort(t), FreePort(t)
	dir := t.TempDir()
	client := "http://127.0.0.1:" + strconv.Itoa(cport)
	peer := "http://127.0.0.1:" + strconv.Itoa(pport)
	s := &Server{
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
		Addr: "127.0.0.1:" + strconv.Itoa(cport),
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
	s.Start(t)
	t.Cleanup(s.Stop)
	return s
}

// EtcdEndpoint is the client URL of an etcd server.
func (s *Server) EtcdEndpoint() string { return "http://" + s.Addr }
