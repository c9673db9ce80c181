package pluginclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cmdRunner runs the plugin process for go-plugin (its runner.Runner), as
// go-plugin's own command runner does, and keeps a copy of the handshake
// line the plugin prints first on stdout
// ("CORE|APP-VERSION|NETWORK|ADDR|PROTOCOL|CERT") so that Launch can name
// the plugin's protocol version when go-plugin refuses it.
type cmdRunner struct {
	cmd    *exec.Cmd
	stdout *handshakeTap
	stderr io.ReadCloser
	path   string
	pid    int // set by Start, before go-plugin reads the handshake
	// waited is closed once Wait (go-plugin calls it as the process
	// starts) has reaped the process; state is then its exit state.
	waited   chan struct{}
	waitOnce sync.Once
	state    *os.ProcessState
}

// newCmdRunner runs cmd; path is the plugin binary it executes (cmd.Path
// is the image's /proc/self/fd path), for go-plugin's messages.
func newCmdRunner(cmd *exec.Cmd, path string) (*cmdRunner, error) {
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	return &cmdRunner{cmd: cmd, stdout: &handshakeTap{r: stdout}, stderr: stderr, path: path, waited: make(chan struct{})}, nil
}

func (c *cmdRunner) Start(context.Context) error {
	if h := TestHookBeforeExec; h != nil {
		h(c.path)
	}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("start plugin %s from its verified image (%s; is /proc mounted?): %w", c.path, c.cmd.Path, err)
	}
	c.pid = c.cmd.Process.Pid
	return nil
}

func (c *cmdRunner) Wait(context.Context) error {
	err := c.cmd.Wait()
	c.waitOnce.Do(func() {
		c.state = c.cmd.ProcessState
		close(c.waited)
	})
	return err
}

// exitState is how the process ended ("exit status 2", "signal:
// killed"), once Wait reaped it within d; "" if it did not.
func (c *cmdRunner) exitState(d time.Duration) string {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.waited:
	case <-t.C:
		return ""
	}
	if c.state == nil {
		return ""
	}
	return c.state.String()
}

func (c *cmdRunner) Kill(context.Context) error {
	if c.cmd.Process == nil {
		return nil
	}
	if err := c.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	return nil
}

func (c *cmdRunner) Stdout() io.ReadCloser { return c.stdout }
func (c *cmdRunner) Stderr() io.ReadCloser { return c.stderr }
func (c *cmdRunner) Name() string          { return c.path }
func (c *cmdRunner) ID() string            { return strconv.Itoa(c.pid) }

func (c *cmdRunner) Diagnose(context.Context) string {
	return "the binary may be built for another architecture, lack a library, or not be a Ferry plugin (it did not print go-plugin's handshake)"
}

func (c *cmdRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

func (c *cmdRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}

// handshakeVersion returns the protocol version the plugin's handshake
// line announced, if it printed one.
func (c *cmdRunner) handshakeVersion() (int, bool) { return c.stdout.version() }

// maxHandshake caps the plugin's first line on stdout, go-plugin's
// handshake (about 1 KiB with AutoMTLS's certificate). A longer one fails
// the launch: go-plugin would otherwise buffer up to 64 KiB of whatever
// the binary prints before it gives up.
const maxHandshake = 16 << 10

// errHandshakeTooLong is what go-plugin's reader of stdout gets once the
// first line passes maxHandshake: it stops reading and the launch fails.
var errHandshakeTooLong = errors.New("handshake line too long")

// handshakeTap passes the plugin's stdout through and keeps its first line.
type handshakeTap struct {
	r io.ReadCloser

	mu       sync.Mutex
	line     []byte
	done     bool // the first line is complete, or over maxHandshake
	overlong bool // the first line passed maxHandshake
}

func (h *handshakeTap) Read(p []byte) (int, error) {
	h.mu.Lock()
	overlong := h.overlong
	h.mu.Unlock()
	if overlong {
		return 0, errHandshakeTooLong
	}
	n, err := h.r.Read(p)
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done && n > 0 {
		b := p[:n]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b, h.done = b[:i], true
		}
		if len(h.line)+len(b) > maxHandshake {
			h.done, h.overlong = true, true
			return 0, errHandshakeTooLong
		}
		h.line = append(h.line, b...)
	}
	return n, err
}

// tooLong reports whether the plugin's first line passed maxHandshake.
func (h *handshakeTap) tooLong() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.overlong
}

func (h *handshakeTap) Close() error { return h.r.Close() }

func (h *handshakeTap) version() (int, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	parts := strings.Split(strings.TrimSpace(string(h.line)), "|")
	if len(parts) < 2 {
		return 0, false
	}
	if _, err := strconv.Atoi(parts[0]); err != nil {
		return 0, false
	}
	v, err := strconv.Atoi(parts[1])
	if err != nil {
		return 0, false
	}
	return v, true
}
