package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
)

type pluginReport struct {
	Name      string   `json:"name"`
	Path      string   `json:"path"`
	SHA256    string   `json:"sha256,omitempty"`
	Version   string   `json:"version,omitempty"`
	Protocol  int      `json:"protocol,omitempty"`
	Available bool     `json:"available"`
	Reason    string   `json:"reason,omitempty"`
	Rails     []string `json:"rails,omitempty"`
	// Failed is set when the plugin could not be started or asked at all
	// (missing binary, checksum mismatch, handshake): Reason says why. A
	// plugin that runs and says its hardware is absent is not failed.
	Failed bool `json:"failed,omitempty"`
	// Config says whether the plugin takes its block's settings, with
	// --config: "ok", the plugin's error (file:line:col), or why it was
	// not checked.
	Config string `json:"config,omitempty"`
}

// inspect starts one plugin, asks it what it is and whether it can run
// here and, with start (a config's plugin block), whether it takes its
// settings, and stops it.
func inspect(ctx context.Context, spec loader.Spec, start *sdk.StartConfig) pluginReport {
	r := pluginReport{Name: spec.Name, Path: spec.Path}
	p, err := loader.Start(ctx, spec, nil)
	if err != nil {
		r.Reason, r.Failed = err.Error(), true
		return r
	}
	defer p.Kill()
	r.SHA256, r.Version, r.Protocol = p.SHA256, p.Info.Version, p.Protocol
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	pr, err := p.Client.Probe(cctx)
	if err != nil {
		r.Reason, r.Failed = "probe failed: "+err.Error(), true
		return r
	}
	r.Available, r.Reason = pr.Available, pr.Reason
	for _, rl := range pr.Rails {
		r.Rails = append(r.Rails, rl.Name)
	}
	if start != nil {
		switch err := p.Client.CheckConfig(cctx, *start); {
		case errors.Is(err, pluginclient.ErrUnimplemented):
			r.Config = "not checked: the plugin cannot check its settings without starting (no sdk.ConfigChecker)"
		case err != nil:
			r.Config, r.Failed = err.Error(), true
			r.Reason = "its settings are refused: " + err.Error()
		default:
			r.Config = "ok"
		}
	}
	return r
}

// startConfig is the StartConfig an engine of cfg gives plugin block pc.
func startConfig(cfg *config.Config, pc config.Plugin) *sdk.StartConfig {
	return &sdk.StartConfig{Engine: cfg.Name, MachineID: cfg.MachineID, Config: pc.Body, ConfigFile: pc.BodyFile,
		ConfigLine: pc.BodyLine, ConfigColumn: pc.BodyColumn, ConfigByte: pc.BodyByte}
}

func cmdPlugins(args []string) error {
	fs := flag.NewFlagSet("plugins", flag.ExitOnError)
	cfgPath := fs.String("config", "", "HCL config file: list its plugins (default: every ferry-plugin-* in --dir)")
	dir := fs.String("dir", "", "plugin directory (default: beside the ferry binary)")
	asJSON := fs.Bool("json", false, "one JSON object per plugin")
	engine := fs.String("engine", "", "report a running engine's plugins and rails instead: its control address (host:port, as `ferry run` prints); with a cluster secret, give the engine's --config too")
	fs.Parse(args)
	if *engine != "" {
		var o control.Options
		if *cfgPath != "" {
			cfg, err := loadConfig(*cfgPath, "", "")
			if err != nil {
				return err
			}
			if o.Secret, err = host.ClusterSecret(cfg); err != nil {
				return err
			}
		}
		return engineStatus(*engine, o, *asJSON)
	}

	var specs []loader.Spec
	var starts []*sdk.StartConfig
	if *cfgPath != "" {
		cfg, err := loadConfig(*cfgPath, "", "")
		if err != nil {
			return err
		}
		d := *dir
		if d == "" {
			d = cfg.PluginDir
		}
		for _, p := range cfg.Plugins {
			specs = append(specs, loader.Spec{Name: p.Name, Path: loader.Resolve(p.Name, p.Path, d, filepath.Dir(cfg.File)), SHA256: p.SHA256})
			starts = append(starts, startConfig(cfg, p))
		}
	} else {
		d := *dir
		if d == "" {
			d = loader.DefaultDir()
		}
		matches, _ := filepath.Glob(filepath.Join(d, loader.BinaryPrefix+"*"))
		sort.Strings(matches)
		for _, m := range matches {
			specs = append(specs, loader.Spec{Name: strings.TrimPrefix(filepath.Base(m), loader.BinaryPrefix), Path: m})
		}
		if len(specs) == 0 {
			return fmt.Errorf("no %s* binaries in %s: run `make build` or pass --dir", loader.BinaryPrefix, d)
		}
	}
	ctx := context.Background()
	var reports []pluginReport
	for i, s := range specs {
		var start *sdk.StartConfig
		if i < len(starts) {
			start = starts[i]
		}
		reports = append(reports, inspect(ctx, s, start))
	}
	if err := printReports(reports, *asJSON); err != nil {
		return err
	}
	var failed []string
	for _, r := range reports {
		if r.Failed {
			failed = append(failed, r.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d plugins cannot be started (%s): see their reason above", len(failed), len(reports), strings.Join(failed, ", "))
	}
	return nil
}

// jsonLines writes rows to stdout, one JSON object a line.
func jsonLines[T any](rows []T) error {
	enc := json.NewEncoder(os.Stdout)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}

// printReports writes reports as a table, or as JSON lines.
func printReports(reports []pluginReport, asJSON bool) error {
	if asJSON {
		return jsonLines(reports)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tVERSION\tPROTOCOL\tSHA256\tPROBE\tPATH")
	for _, r := range reports {
		probe := "available"
		switch {
		case r.Failed:
			probe = "FAILED: " + r.Reason
		case !r.Available:
			probe = "unavailable: " + r.Reason
		case len(r.Rails) > 0:
			probe += " (" + strings.Join(r.Rails, ", ") + ")"
		}
		if r.Config == "ok" {
			probe += ", settings ok"
		}
		sum := r.SHA256
		if len(sum) > 16 {
			sum = sum[:16] + "…"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, r.Version, r.Protocol, sum, probe, r.Path)
	}
	return tw.Flush()
}

// engineStatus prints what a running engine says of its plugins (state,
// process, restarts, stalls, faulty runs, completions that broke the
// contract, outstanding descriptors, why it is not running) and its rails, asked through its control service.
func engineStatus(addr string, o control.Options, asJSON bool) error {
	c, err := control.DialOptions(addr, o)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := c.Status(ctx)
	if err != nil {
		return fmt.Errorf("%w; is an engine serving its control service at %s? With a cluster secret, pass the engine's --config", err, addr)
	}
	if asJSON {
		_, err := fmt.Println(string(b))
		return err
	}
	var st host.EngineStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("engine at %s: status: %w", addr, err)
	}
	fmt.Printf("engine %s (incarnation %d) at %s\n\n", st.Name, st.Incarnation, addr)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tSTATE\tPID\tRESTARTS\tSTALLS\tFAULTY\tBAD COMPLETIONS\tOUTSTANDING\tREASON")
	for _, p := range st.Plugins {
		why := p.Reason
		if why == "" && p.LastExit != "" {
			why = "last exit: " + p.LastExit
		}
		bad := fmt.Sprintf("%d unknown, %d duplicate, %d over-long", p.UnknownCompletions, p.DuplicateCompletions, p.OverlongCompletions)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\n", p.Name, p.State, p.PID, p.Restarts, p.Stalls, p.Faulty, bad, p.Outstanding, why)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(st.Rails) == 0 {
		return nil
	}
	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSPORT\tRAIL\tNAME\tLABEL\tNUMA\tBYTES\tSLICES\tIN FLIGHT\tEWMA Gb/s\tERRORS\tPAUSED")
	for _, r := range st.Rails {
		paused := "no"
		if r.Paused {
			paused = "until " + r.PausedUntil.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%d\t%d\t%d\t%d\t%.3f\t%d\t%s\n", r.Transport, r.Index, r.Name, r.Label, r.NUMANode, r.Bytes, r.Slices, r.InFlight, r.EWMAGbps, r.Errors, paused)
	}
	return tw.Flush()
}
