package sdk

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"

	"github.com/ferrydev/ferry/sdk/shm"
)

// Process is a transport plugin process started by Launch: its control
// client with the fd socket attached, and its lifecycle.
type Process struct {
	Client   *TransportClient
	Protocol int // negotiated protocol version

	gp       *plugin.Client
	fds      *shm.FDSender
	exited   chan struct{}
	stopped  chan struct{}
	killOnce sync.Once
}

// Launch starts the plugin binary at path the way a Ferry host does: gRPC
// only, AutoMTLS, the checksum verified by go-plugin before exec when
// checksum is set, an fd socket inherited as fd 3, and Pdeathsig so that
// the plugin dies with its host. The host's sdk/plugintest and the engine's
// loader both start plugins through it.
func Launch(ctx context.Context, path string, checksum []byte, logger hclog.Logger) (*Process, error) {
	hostEnd, childEnd, err := shm.Socketpair()
	if err != nil {
		return nil, fmt.Errorf("create fd socket: %w", err)
	}
	defer childEnd.Close() // the child holds its own copy once started
	sender, err := shm.NewFDSender(hostEnd)
	if err != nil {
		hostEnd.Close()
		return nil, fmt.Errorf("create fd socket: %w", err)
	}
	cmd := exec.Command(path)
	cmd.ExtraFiles = []*os.File{childEnd} // fd 3 in the child
	cmd.Env = append(os.Environ(), FDSocketEnv+"=3")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	cc := &plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: PluginSets(),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           logger,
		StartTimeout:     15 * time.Second,
	}
	if checksum != nil {
		cc.SecureConfig = &plugin.SecureConfig{Checksum: checksum, Hash: sha256.New()}
	}
	gp := plugin.NewClient(cc)
	fail := func(err error) (*Process, error) {
		gp.Kill()
		sender.Close()
		return nil, err
	}
	rpc, err := gp.Client()
	if err != nil {
		return fail(err)
	}
	raw, err := rpc.Dispense(KindTransport)
	if err != nil {
		return fail(fmt.Errorf("dispense transport: %w", err))
	}
	client, ok := raw.(*TransportClient)
	if !ok {
		return fail(fmt.Errorf("dispensed %T, not a transport client", raw))
	}
	client.SetFDSender(sender)
	p := &Process{
		Client: client, Protocol: gp.NegotiatedVersion(),
		gp: gp, fds: sender,
		exited: make(chan struct{}), stopped: make(chan struct{}),
	}
	go p.watch()
	return p, nil
}

// watch closes exited when the process is gone or killed.
func (p *Process) watch() {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		if p.gp.Exited() {
			close(p.exited)
			return
		}
		select {
		case <-t.C:
		case <-p.stopped:
			close(p.exited)
			return
		}
	}
}

// Exited is closed when the plugin process has exited or was killed.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// PID returns the plugin's process id, or 0.
func (p *Process) PID() int {
	if rc := p.gp.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// Kill stops the plugin (gracefully, then SIGKILL) and closes the fd
// socket. Safe to call more than once and concurrently.
func (p *Process) Kill() {
	p.killOnce.Do(func() {
		close(p.stopped)
		p.gp.Kill()
		p.fds.Close()
	})
	<-p.exited
}
