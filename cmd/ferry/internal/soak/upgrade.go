package soak

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ferrydev/ferry/host"
)

// upgradeWithin bounds one live upgrade: the old run's drain bound
// (host.DefaultUpgradeDrain), the new run's start and replay, and room
// to spare. Past it the upgrade counts as failed; the target's control
// stdin is then closed (its answer would come out of turn), which ends
// that engine.
const upgradeWithin = host.DefaultUpgradeDrain + time.Minute

// upgradeFault upgrades a plugin of a random side (or as where narrows
// it) live to a copy of its binary at a new path, pinned by its sha256:
// the initiator's through Engine.UpgradePlugin, the target's through its
// `upgrade` control line. It returns once the old run has stopped. The
// traffic goes on throughout; a task in flight across it must not fail
// (Tally.Task), and an upgrade that does not take over fails the run.
func (r *runner) upgradeFault(ctx context.Context, rng *rand.Rand, where string) {
	side, plugin := r.pickPlugin(rng, where)
	r.upgrades++
	path := filepath.Join(r.cfgDir, fmt.Sprintf("ferry-plugin-%s-%s-%d", plugin, side, r.upgrades))
	sum, cerr := copyBinary(filepath.Join(cmpOr(r.o.PluginDir, filepath.Dir(r.o.Ferry)), "ferry-plugin-"+plugin), path)
	pid, err := r.runningPID(ctx, side, plugin)
	f := Fault{Kind: fmt.Sprintf("%s %s/%s", KindUpgrade, side, plugin), At: r.since(), Detail: fmt.Sprintf("pid %d", pid)}
	ph := r.tally.Inject(f, sampleSelf(r.since()))
	if err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		r.tally.FaultFailed(ph, err)
		r.logf("fault %s: %v", f.Kind, err)
		return
	}
	r.logf("fault: live upgrade of the %s's %s plugin (pid %d) to %s", side, plugin, pid, filepath.Base(path))
	start := time.Now()
	if side == "target" {
		err = r.upgradeTarget(plugin, path, sum)
	} else {
		uctx, cancel := context.WithTimeout(ctx, upgradeWithin)
		err = r.e.UpgradePlugin(uctx, host.PluginUpgrade{Name: plugin, Path: path, SHA256: sum})
		cancel()
	}
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		os.Remove(path)
		r.tally.FaultFailed(ph, err)
		r.logf("UPGRADE FAILED: the %s's %s plugin after %v: %v", side, plugin, took, err)
		return
	}
	detail := fmt.Sprintf("-> pid %s in %v", r.pidWord(ctx, side, plugin), took)
	if side == "initiator" {
		for _, st := range r.e.Status(ctx).Plugins {
			if st.Name == plugin && st.Upgrade != nil {
				detail += fmt.Sprintf(" (drain %s, held %d)", st.Upgrade.Drain, st.Upgrade.Held)
			}
		}
	}
	r.tally.FaultDetail(ph, detail)
	r.logf("the %s's %s plugin upgraded %s", side, plugin, detail)
	// The copy before serves no run now: a later crash restarts the new
	// one (a target restart, the original binary).
	key := side + "/" + plugin
	if prev := r.upgraded[key]; prev != "" {
		os.Remove(prev)
	}
	if r.upgraded == nil {
		r.upgraded = map[string]string{}
	}
	r.upgraded[key] = path
}

// upgradeTarget upgrades the target engine's plugin over its control
// stdin.
func (r *runner) upgradeTarget(plugin, path, sum string) error {
	r.tgt.mu.RLock()
	c := r.tgt.c
	r.tgt.mu.RUnlock()
	if c == nil {
		return fmt.Errorf("the target engine is down")
	}
	if strings.ContainsAny(path, " \t") {
		return fmt.Errorf("%q: the control line takes no path with blanks", path)
	}
	_, err := c.ask(fmt.Sprintf("upgrade %s %s %s", plugin, path, sum), upgradeWithin)
	return err
}

// pidWord is the side's plugin's pid, or "?" when it cannot be read.
func (r *runner) pidWord(ctx context.Context, side, plugin string) string {
	pid, err := r.pluginPID(ctx, side, plugin)
	if err != nil {
		return "?"
	}
	return fmt.Sprint(pid)
}

// copyBinary copies the executable src to dst and returns dst's sha256
// (hex): a new binary at a new path, as an operator installs one.
func copyBinary(src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	if _, err = io.Copy(io.MultiWriter(out, h), in); err == nil {
		err = out.Close()
	} else {
		out.Close()
	}
	if err != nil {
		return "", fmt.Errorf("copy %s: %w", src, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
