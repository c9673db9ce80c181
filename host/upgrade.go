package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/supervisor"
)

// DefaultUpgradeDrain bounds how long a live upgrade lets the old run of
// a plugin finish its work, unless the config's supervise.upgrade_drain
// or PluginUpgrade.Drain says otherwise.
const DefaultUpgradeDrain = config.DefaultUpgradeDrain

// PluginUpgrade says which plugin a live upgrade replaces, and with what.
type PluginUpgrade struct {
	// Name is the plugin block's name ("tcp").
	Name string
	// Path is the new binary; a relative path is taken from the config
	// file's directory, as a plugin block's path is. "" looks the plugin
	// up in the plugin directory again (a binary replaced in place).
	Path string
	// SHA256 pins the new binary (hex); "" checks nothing.
	SHA256 string
	// Config, when set, is the plugin's block as read again (a reload
	// passes it): the new run starts with its `config { ... }` body,
	// errors located in its file. Nil keeps the running run's config.
	// Its Path and SHA256 are not read: the fields above name the binary.
	Config *config.Plugin
	// Drain bounds how long the old run may take to finish what it
	// holds; past it, what it still holds fails over to the new run as
	// after a death. 0: the config's supervise.upgrade_drain
	// (DefaultUpgradeDrain unless set).
	Drain time.Duration
}

// UpgradePlugin replaces a running plugin's binary with no restart of
// the application: the new binary starts beside the old one, gets the
// engine's registrations and open peers (as after a crash restart),
// and takes all new work; the old run then drains (the plugin's Drain
// where it implements sdk.Drainer, else its lanes are waited for, both
// within u.Drain) and is stopped. No task fails because of it: what the
// old run still holds past the bound fails over to the new run, and a
// write of it that may still land is fenced at its target first.
//
// It returns once the old run has stopped, or ctx ended (the drain goes
// on; Status's PluginStatus.Upgrade says when it is done). A new binary
// that does not start (missing, a wrong sha256, a crash or refusal at
// start, a protocol this engine does not speak, a replay refused)
// leaves the old one serving, untouched; the error says why, and so do
// Status (PluginStatus.Upgrade), the log and the metric
// ferry_plugin_upgrades_total{result="failed"}. One upgrade of a plugin
// runs at a time (ErrBusy), and only of a running plugin
// (ErrTransportUnavailable).
func (e *Engine) UpgradePlugin(ctx context.Context, u PluginUpgrade) error {
	ps := e.x.Plugin(u.Name)
	if ps == nil {
		return fmt.Errorf("%w: upgrade: engine %q has no plugin %q", ErrInvalid, e.name, u.Name)
	}
	dir := ""
	if e.cfg.File != "" {
		dir = filepath.Dir(e.cfg.File)
	}
	spec := loader.Spec{Name: u.Name, Path: loader.Resolve(u.Name, u.Path, e.cfg.PluginDir, dir), SHA256: u.SHA256}
	bound := u.Drain
	if bound <= 0 {
		bound = e.cfg.Supervise.WithDefaults().UpgradeDrain
	}
	err := e.x.Upgrade(ctx, ps, spec, u.Config, bound)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, supervisor.ErrUpgradeBusy):
		return fmt.Errorf("%w: %w", ErrBusy, err)
	case errors.Is(err, supervisor.ErrNotRunning):
		return fmt.Errorf("%w: %w", ErrTransportUnavailable, err)
	case errors.Is(err, ErrClosed):
		return err
	}
	return fmt.Errorf("%w: %w", ErrPluginFailed, err)
}
