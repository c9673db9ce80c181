package soak

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process the soak started and may kill: the target engine
// or the metastore.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	waited chan struct{}
	// mu orders control lines to the target engine: one question, one
	// answer.
	mu sync.Mutex
}

// startChild starts argv (through `ip netns exec ns` when ns is set)
// with its stderr to logs, and returns once its first stdout line is
// read: the target's ready line, metad's "serving" line.
func startChild(ns string, logs io.Writer, argv ...string) (*child, string, error) {
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stderr = logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, "", err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, "", err
	}
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start %s: %w", strings.Join(argv, " "), err)
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout), waited: make(chan struct{})}
	c.out.Buffer(make([]byte, 64<<10), 1<<20)
	got := make(chan string, 1)
	go func() {
		if c.out.Scan() {
			got <- c.out.Text()
		}
		close(got)
	}()
	go func() { cmd.Wait(); close(c.waited) }()
	select {
	case line, ok := <-got:
		if ok {
			return c, line, nil
		}
		err = fmt.Errorf("%s exited before it was ready (see its log above)", strings.Join(argv, " "))
	case <-time.After(60 * time.Second):
		err = fmt.Errorf("%s not ready after 60s", strings.Join(argv, " "))
	}
	c.kill()
	return nil, "", err
}

// pid is the child's process id.
func (c *child) pid() int { return c.cmd.Process.Pid }

// kill ends the child with SIGKILL and waits for it (its pipes close).
func (c *child) kill() {
	c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.waited
	c.stdin.Close()
}

// stop closes the child's stdin (a `ferry run --control-stdin` exits at
// EOF), then sends SIGTERM, then SIGKILL, 10s apart; with term, SIGTERM
// at once (`ferry metad` does not read its stdin).
func (c *child) stop(term bool) {
	c.stdin.Close()
	sigs := []syscall.Signal{0, syscall.SIGTERM, syscall.SIGKILL}
	if term {
		sigs = sigs[1:]
	}
	for _, sig := range sigs {
		if sig != 0 {
			c.cmd.Process.Signal(sig)
		}
		select {
		case <-c.waited:
			return
		case <-time.After(10 * time.Second):
		}
	}
}

// ask sends one control line to a `ferry run --control-stdin` child and
// returns its answer.
func (c *child) ask(line string, within time.Duration) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, err := fmt.Fprintln(c.stdin, line); err != nil {
		return "", err
	}
	got := make(chan bool, 1)
	go func() { got <- c.out.Scan() }()
	select {
	case ok := <-got:
		if !ok {
			return "", fmt.Errorf("target engine gone")
		}
	case <-time.After(within):
		// The scanner is still in use: this child answers no more.
		c.stdin.Close()
		return "", fmt.Errorf("target engine did not answer %q within %v", line, within)
	}
	ans := c.out.Text()
	if strings.HasPrefix(ans, "error:") {
		return "", fmt.Errorf("target: %s", ans)
	}
	return ans, nil
}

// ready is the part of `ferry run`'s ready line the soak reads.
type ready struct {
	Name        string `json:"name"`
	Incarnation uint64 `json:"incarnation"`
	Buffers     []struct {
		Base   uint64 `json:"base"`
		Length int    `json:"length"`
	} `json:"buffers"`
}

// pluginPID is one plugin in the answer to the `plugins` control line.
type pluginPID struct {
	Name  string `json:"name"`
	State string `json:"state"`
	PID   int    `json:"pid"`
}

// targetPlugins asks the target engine for its plugins and their pids.
func (c *child) targetPlugins() ([]pluginPID, error) {
	ans, err := c.ask("plugins", 10*time.Second)
	if err != nil {
		return nil, err
	}
	var ps []pluginPID
	if err := json.Unmarshal([]byte(ans), &ps); err != nil {
		return nil, fmt.Errorf("target's plugins line %q: %w", ans, err)
	}
	return ps, nil
}

// freePort picks a port on host that is free now, for a metastore that
// must come back on the same address after a restart.
func freePort(host string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}

// metad is `ferry metad` on a fixed address, restartable.
type metad struct {
	ferry, addr, ns string
	logs            io.Writer
	c               *child
	url             string
}

func (m *metad) start() error {
	var err error
	for range 50 { // the port may linger for a moment after a kill
		var line string
		m.c, line, err = startChild(m.ns, m.logs, m.ferry, "metad", "--listen", m.addr)
		if err == nil {
			m.url = strings.TrimPrefix(line, "ferry metad: serving ")
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// fileExists reports whether path names a file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
