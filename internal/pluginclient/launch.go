package pluginclient

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/internal/logargs"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/shm"
)

// Process is a transport plugin process started by Launch: its control
// client with the fd socket attached, and its lifecycle.
type Process struct {
	Client   *Client
	Protocol int // negotiated protocol version
	*lifecycle
}

// DeviceProcess is a device plugin process started by LaunchDevice: its
// control client with the fd socket attached, and the same lifecycle as a
// transport's Process (Exited, ExitState, PID, Abort, Kill).
type DeviceProcess struct {
	Client   *DeviceClient
	Protocol int // negotiated protocol version
	*lifecycle
}

// lifecycle is a started plugin process of any kind: go-plugin's client,
// the process, and the host end of its fd socket.
type lifecycle struct {
	gp       *plugin.Client
	run      *cmdRunner
	fds      *shm.FDSender
	exited   chan struct{}
	stopped  chan struct{}
	killOnce sync.Once
	// pidf refers to the process itself, not to its pid, so neither watch
	// nor Abort can reach another process that reused the pid; nil where
	// pidfds are missing.
	pidf *os.File
}

// Launch starts the plugin binary at path the way a Ferry host does: it
// reads the binary once into an Image, refuses it with
// plugin.ErrChecksumsDoNotMatch when checksum is set and differs from the
// image's sha256, and runs it with LaunchImage. sdk/plugintest starts
// plugins through it; the host's loader reads the Image itself.
func Launch(ctx context.Context, path string, checksum []byte, logger hclog.Logger) (*Process, error) {
	img, err := OpenImage(path)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	if checksum != nil && !bytes.Equal(img.SHA256[:], checksum) {
		return nil, plugin.ErrChecksumsDoNotMatch
	}
	return LaunchImage(ctx, img, logger)
}

// imageFD is the descriptor number the image's memfd has in the child, and
// imageExec the path through which the child executes it: the kernel
// resolves /proc/self/fd/4 in the child, after the fds were arranged and
// before exec, so what runs is the memfd's bytes and never the file at
// img.Path, whatever was put there since it was hashed. The plugin inherits
// fd 4 (its own sealed image) and may close it.
const (
	imageFD   = 4
	imageExec = "/proc/self/fd/4"
)

// TestHookBeforeExec, when set, runs just before the plugin process is
// executed, after its binary was hashed: the window in which an attacker
// would swap the file. For tests only; nil otherwise.
var TestHookBeforeExec func(path string)

// LaunchImage starts the plugin held by img the way a Ferry host does:
// gRPC only, AutoMTLS, the image's bytes executed through its memfd, an
// fd socket inherited as fd 3, and Pdeathsig so that the plugin dies with
// its host. img may be closed once LaunchImage returns.
//
// The handshake offers every version in HostVersions and go-plugin picks
// the highest the plugin serves. A plugin that serves none of them fails
// with a *VersionError naming both sides' versions.
func LaunchImage(ctx context.Context, img *Image, logger hclog.Logger) (*Process, error) {
	lc, raw, err := launch(img, logger, PluginSets(), sdk.KindTransport)
	if err != nil {
		return nil, err
	}
	client, ok := raw.(*Client)
	if !ok {
		lc.Kill()
		return nil, fmt.Errorf("dispensed %T, not a transport client", raw)
	}
	client.SetFDSender(lc.fds)
	return &Process{Client: client, Protocol: lc.gp.NegotiatedVersion(), lifecycle: lc}, nil
}

// LaunchDevice starts the device plugin held by img as LaunchImage starts
// a transport (same process, fd socket and lifecycle) and dispenses its
// DeviceClient. The handshake offers the host's versions from
// sdk.DeviceProtocolVersion on. img may be closed once it returns.
func LaunchDevice(ctx context.Context, img *Image, logger hclog.Logger) (*DeviceProcess, error) {
	lc, raw, err := launch(img, logger, DevicePluginSets(), sdk.KindDevice)
	if err != nil {
		return nil, err
	}
	client, ok := raw.(*DeviceClient)
	if !ok {
		lc.Kill()
		return nil, fmt.Errorf("dispensed %T, not a device client", raw)
	}
	client.fds = lc.fds
	return &DeviceProcess{Client: client, Protocol: lc.gp.NegotiatedVersion(), lifecycle: lc}, nil
}

// launch starts the plugin held by img with go-plugin, offering sets, and
// dispenses kind from it: what LaunchImage and LaunchDevice share.
func launch(img *Image, logger hclog.Logger, sets map[int]plugin.PluginSet, kind string) (*lifecycle, any, error) {
	path := img.Path
	hostEnd, childEnd, err := shm.Socketpair()
	if err != nil {
		return nil, nil, fmt.Errorf("create fd socket: %w", err)
	}
	defer childEnd.Close() // the child holds its own copy once started
	sender, err := shm.NewFDSender(hostEnd)
	if err != nil {
		hostEnd.Close()
		return nil, nil, fmt.Errorf("create fd socket: %w", err)
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	env := []string{sdk.FDSocketEnv + "=3"}
	if lv := logger.GetLevel(); lv != hclog.NoLevel && lv != hclog.Off {
		env = append(env, sdk.LogLevelEnv+"="+lv.String()) // the plugin logs what we would show
	}
	// go-plugin decodes the plugin's JSON log lines, numbers as float64:
	// write whole ones as integers again.
	logger = logargs.Map(logger, logargs.WholeFloats)
	var run *cmdRunner
	cc := &plugin.ClientConfig{
		HandshakeConfig:  sdk.Handshake,
		VersionedPlugins: sets,
		// Our own runner, to execute the image rather than the path and
		// to see the handshake line go-plugin reads: it names the version
		// the plugin chose, which go-plugin's error does not carry as a
		// value.
		RunnerFunc: func(_ hclog.Logger, spec *exec.Cmd, _ string) (runner.Runner, error) {
			cmd := exec.Command(imageExec)
			cmd.Args[0] = path
			cmd.ExtraFiles = []*os.File{childEnd, img.mem} // fds 3 and imageFD in the child
			cmd.Env = append(spec.Env, env...)
			cmd.Stdin = spec.Stdin
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			r, err := newCmdRunner(cmd, path)
			run = r
			return r, err
		},
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           logger,
		StartTimeout:     15 * time.Second,
	}
	gp := plugin.NewClient(cc)
	fail := func(err error) (*lifecycle, any, error) {
		gp.Kill()
		sender.Close()
		return nil, nil, err
	}
	rpc, err := gp.Client()
	if err != nil {
		if run != nil {
			if run.stdout.tooLong() {
				return fail(fmt.Errorf("plugin %s printed a first line of over %d bytes on stdout, where go-plugin's handshake goes: "+
					"it is not a Ferry plugin, or it prints to stdout before it serves: %w", path, maxHandshake, err))
			}
			if v, ok := run.handshakeVersion(); ok && !speaks(v) {
				return fail(&VersionError{Path: path, PluginVersions: []int{v}, HostVersions: HostVersions(), Err: err})
			}
		}
		return fail(err)
	}
	raw, err := rpc.Dispense(kind)
	if err != nil {
		return fail(fmt.Errorf("dispense %s: %w", kind, err))
	}
	p := &lifecycle{
		gp: gp, run: run, fds: sender,
		exited: make(chan struct{}), stopped: make(chan struct{}),
	}
	p.pidf = p.pidfd()
	go p.watch()
	return p, raw, nil
}

// watch closes exited when the process is gone or killed. It waits on a
// pidfd through the netpoller, so an idle host spends nothing on it; where
// pidfds are missing (Linux < 5.3) it falls back to polling.
func (p *lifecycle) watch() {
	defer close(p.exited)
	if f := p.pidf; f != nil {
		gone := make(chan struct{})
		go func() {
			defer close(gone)
			rc, err := f.SyscallConn()
			if err != nil {
				return
			}
			// The callback reports whether the pidfd is readable, i.e. the
			// process exited; until then the runtime parks this goroutine
			// in the netpoller. Closing f ends the wait.
			rc.Read(func(fd uintptr) bool { return pidfdReadable(int(fd)) })
		}()
		select {
		case <-gone:
		case <-p.stopped:
		}
		f.Close()
		<-gone
		return
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for !p.gp.Exited() {
		select {
		case <-t.C:
		case <-p.stopped:
			return
		}
	}
}

// pidfdReadable reports whether the pidfd fd is readable: its process
// exited. A poll that a signal interrupts is tried again: with a zero
// timeout poll fails with EINTR whenever a signal is pending (the Go
// runtime's preemption, a child's SIGCHLD), and taking that for the exit
// had the supervisor kill a healthy plugin as it started (one ferry bench
// run in a dozen). Another error also reads as gone: the wait cannot go
// on, and a plugin the host cannot watch is restarted rather than trusted.
func pidfdReadable(fd int) bool {
	pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := pollPidfd(pfd, 0)
		if err == unix.EINTR {
			continue
		}
		return err != nil || n > 0
	}
}

// pollPidfd is unix.Poll; a test makes it fail as a signal would.
var pollPidfd = unix.Poll

// pidfd opens a non-blocking pidfd for the plugin process, or nil.
func (p *lifecycle) pidfd() *os.File {
	pid := p.PID()
	if pid <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return nil
	}
	return os.NewFile(uintptr(fd), fmt.Sprintf("pidfd-%d", pid))
}

// Exited is closed when the plugin process has exited or was killed.
func (p *lifecycle) Exited() <-chan struct{} { return p.exited }

// ExitState says how the exited process ended, as os.ProcessState does
// ("exit status 2", "signal: segmentation fault"), waiting up to d for
// it to be reaped; "" when it was not within d (call after Exited).
func (p *lifecycle) ExitState(d time.Duration) string {
	if p.run == nil || p.run.waited == nil {
		return ""
	}
	return p.run.exitState(d)
}

// PID returns the plugin's process id, or 0.
func (p *lifecycle) PID() int {
	if p.run == nil {
		return 0
	}
	return p.run.pid
}

// Abort sends the plugin SIGKILL at once, without the graceful stop Kill
// tries first: for a plugin that no longer answers. Exited is closed once
// it is gone; Kill still releases the client and the fd socket. A plugin
// already gone is not an error.
func (p *lifecycle) Abort() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if p.pidf == nil {
		pid := p.PID()
		if pid <= 0 {
			return fmt.Errorf("abort plugin: no process id")
		}
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
			return fmt.Errorf("abort plugin %d: %w", pid, err)
		}
		return nil
	}
	rc, err := p.pidf.SyscallConn()
	if err != nil {
		return nil // closed: watch saw the process exit
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.PidfdSendSignal(int(fd), unix.SIGKILL, nil, 0) }); err != nil {
		return nil // closed meanwhile: gone
	}
	if serr != nil && serr != unix.ESRCH {
		return fmt.Errorf("abort plugin %d: %w", p.PID(), serr)
	}
	return nil
}

// Kill stops the plugin (gracefully, then SIGKILL) and closes the fd
// socket. Safe to call more than once and concurrently.
func (p *lifecycle) Kill() {
	p.killOnce.Do(func() {
		close(p.stopped)
		p.gp.Kill()
		p.fds.Close()
	})
	<-p.exited
}
