package loader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
)

// BinaryPrefix is how plugin executables are named: ferry-plugin-<name>.
const BinaryPrefix = "ferry-plugin-"

// ErrPlugin is wrapped by every error this package returns about a plugin.
var ErrPlugin = errors.New("plugin failed")

// Spec says which plugin to start and how to check it.
type Spec struct {
	Name   string // "tcp"
	Path   string // resolved binary path
	SHA256 string // expected hex digest; "" = not checked
}

// Error is a plugin failure with the plugin's name, path and the reason.
type Error struct {
	Name, Path string
	Reason     string
	Err        error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("plugin %q (%s): %s", e.Name, e.Path, e.Reason)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap lets errors.Is find ErrPlugin and the cause.
func (e *Error) Unwrap() []error { return []error{ErrPlugin, e.Err} }

// DefaultDir is where plugins are looked for when the config names no
// plugin_dir: the directory of the running executable.
func DefaultDir() string {
	exe, err := os.Executable()
	if err != nil {
		return "bin"
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return filepath.Dir(exe)
}

// DirEnv names the environment variable that says where plugin binaries
// are when the config sets neither a plugin's path nor plugin_dir: an
// application embedding the engine is rarely installed beside them.
const DirEnv = "FERRY_PLUGIN_DIR"

// DevicePrefix is how device plugin executables are named:
// ferry-device-<name>.
const DevicePrefix = "ferry-device-"

// Resolve returns the binary path for a plugin: path if set (relative to
// baseDir when relative), else dir/ferry-plugin-<name>, dir being, when
// empty, $FERRY_PLUGIN_DIR or else the directory of the running binary.
func Resolve(name, path, dir, baseDir string) string {
	return resolve(BinaryPrefix, name, path, dir, baseDir)
}

// ResolveDevice is Resolve for a device plugin: dir/ferry-device-<name>.
func ResolveDevice(name, path, dir, baseDir string) string {
	return resolve(DevicePrefix, name, path, dir, baseDir)
}

func resolve(prefix, name, path, dir, baseDir string) string {
	if path != "" {
		if !filepath.IsAbs(path) && baseDir != "" {
			return filepath.Join(baseDir, path)
		}
		return path
	}
	if dir == "" {
		dir = os.Getenv(DirEnv)
	}
	if dir == "" {
		dir = DefaultDir()
	}
	return filepath.Join(dir, prefix+name)
}

// FileSHA256 returns the hex sha256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// VersionError is a plugin that shares no protocol version with this host
// (or reports another one than the handshake chose). Start's *Error wraps
// it: find it with errors.As.
type VersionError = pluginclient.VersionError

// ErrUnimplemented is matched (errors.Is) by the error of a call to an
// optional interface the plugin lacks (Client.Drain on a plugin without
// sdk.Drainer, or built for protocol 1).
var ErrUnimplemented = pluginclient.ErrUnimplemented

// HostVersions are the protocol versions this host speaks.
func HostVersions() []int { return pluginclient.HostVersions() }

// Plugin is a verified, running plugin process.
type Plugin struct {
	*pluginclient.Process
	Name   string
	Path   string
	SHA256 string // of the binary that was started
	// Info is what the plugin said it is and can do. Its capabilities
	// (Ops, MaxSlice, PreferredSlice) are zero from a protocol-1 plugin:
	// unknown, so the host uses its defaults.
	Info sdk.Info
	// Interfaces are the optional interfaces the plugin implements
	// (sdk.InterfaceDrainer, ...); see Implements.
	Interfaces []string
	// SealedRegions: the plugin takes sealed regions (RegisterSealed).
	SealedRegions bool
}

// Implements reports whether the plugin said it implements the optional
// interface name (sdk.InterfaceDrainer, ...).
func (p *Plugin) Implements(name string) bool {
	return pluginclient.Description{Interfaces: p.Interfaces}.Implements(name)
}

// Describe asks the plugin again what it is and can do and updates Info
// and Interfaces: a plugin whose limits depend on its configuration
// (tcp's max_frame) reports the configured ones once started. Not safe to
// call while another goroutine reads Info.
func (p *Plugin) Describe(ctx context.Context) error {
	d, err := p.Client.Describe(ctx)
	if err != nil {
		return &Error{Name: p.Name, Path: p.Path, Reason: "describe failed", Err: err}
	}
	if err := checkDescription(d); err != nil {
		return &Error{Name: p.Name, Path: p.Path, Reason: "describes itself out of bounds", Err: err}
	}
	p.Info, p.Interfaces, p.SealedRegions = d.Info, d.Interfaces, d.SealedRegions
	return nil
}

// check reads the binary before anything runs, through one descriptor:
// present, not a directory, executable, then its bytes into an Image
// whose sha256 must match the pin. What Start executes is that Image, so
// the checked bytes are the bytes that run.
func check(spec Spec) (*pluginclient.Image, error) {
	fail := func(reason string, err error) (*pluginclient.Image, error) {
		return nil, &Error{Name: spec.Name, Path: spec.Path, Reason: reason, Err: err}
	}
	f, err := os.Open(spec.Path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fail("binary not found; build it with `make build` (or go install ./plugins/...), then set path or plugin_dir in the config, or $"+DirEnv, nil)
	case err != nil:
		return fail("cannot open binary", err)
	}
	defer f.Close()
	st, err := f.Stat()
	switch {
	case err != nil:
		return fail("cannot stat binary", err)
	case st.IsDir():
		return fail("is a directory, not a plugin binary", nil)
	case st.Mode()&0o111 == 0:
		return fail("binary is not executable; chmod +x it", nil)
	}
	img, err := pluginclient.ReadImage(f, spec.Path)
	if err != nil {
		return fail("cannot read binary", err)
	}
	if sum := hex.EncodeToString(img.SHA256[:]); spec.SHA256 != "" && !strings.EqualFold(sum, spec.SHA256) {
		img.Close()
		return fail(fmt.Sprintf("checksum mismatch: config says sha256 %s, binary is %s; reinstall the plugin or update sha256 in the config", spec.SHA256, sum), nil)
	}
	return img, nil
}

// Start verifies and starts the plugin and dispenses its transport client.
// The plugin runs the bytes check hashed, whatever happens to the file at
// spec.Path meanwhile. It dies with the host (Pdeathsig) and sees EOF on
// its fd socket when the host goes away.
func Start(ctx context.Context, spec Spec, logger hclog.Logger) (*Plugin, error) {
	img, err := check(spec)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	fail := func(reason string, err error) (*Plugin, error) {
		return nil, &Error{Name: spec.Name, Path: spec.Path, Reason: reason, Err: err}
	}
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	proc, err := pluginclient.LaunchImage(ctx, img, logger.Named(spec.Name))
	if err != nil {
		reason := "failed to start"
		var verr *VersionError
		if errors.As(err, &verr) {
			reason = "speaks an unsupported protocol version"
		}
		return fail(reason, err)
	}
	p := &Plugin{Process: proc, Name: spec.Name, Path: spec.Path, SHA256: hex.EncodeToString(img.SHA256[:])}
	d, err := proc.Client.Describe(ctx)
	if err != nil {
		p.Kill()
		return fail("describe failed", err)
	}
	if err := checkDescription(d); err != nil {
		p.Kill()
		return fail("describes itself out of bounds", err)
	}
	if int(d.Protocol) != proc.Protocol {
		p.Kill()
		return fail(fmt.Sprintf("reports protocol version %d in Describe, but the handshake chose %d", d.Protocol, proc.Protocol),
			&VersionError{Path: spec.Path, PluginVersions: []int{int(d.Protocol)}, HostVersions: HostVersions()})
	}
	p.Info, p.Interfaces, p.SealedRegions = d.Info, d.Interfaces, d.SealedRegions
	return p, nil
}
