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
	Name string `json:"name"`
	// Kind is "transport" (ferry-plugin-*) or "device" (ferry-device-*).
	Kind      string `json:"kind"`
	Path      string `json:"path"`
	SHA256    string `json:"sha256,omitempty"`
	Version   string `json:"version,omitempty"`
	Protocol  int    `json:"protocol,omitempty"`
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	// Rails are the plugin's rails: with a config block, those the
	// block configures (the plugin is started with it to learn them);
	// else its defaults. RailsNote says why they could not be learnt
	// from the block.
	Rails     []string `json:"rails,omitempty"`
	RailsNote string   `json:"rails_note,omitempty"`
	// SameMachineOnly: the transport reaches only engines on this
	// machine (sdk.Info.SameMachineOnly).
	SameMachineOnly bool `json:"same_machine_only,omitempty"`
	// Failed is set when the plugin could not be started or asked at all
	// (missing binary, checksum mismatch, handshake): Reason says why. A
	// plugin that runs and says its hardware is absent is not failed.
	Failed bool `json:"failed,omitempty"`
	// Config says whether the plugin takes its block's settings, with
	// --config: "ok", the plugin's error (file:line:col), or why it was
	// not checked.
	Config string `json:"config,omitempty"`
	// TestTool: the transport declares itself a tool for tests
	// (sdk.Info.TestTool: plugins/fault). Simulated: the device plugin
	// drives no hardware (sdk.DeviceInfo.Simulated: simdev). Without --all
	// the listing of a directory leaves both out.
	TestTool  bool `json:"test_tool,omitempty"`
	Simulated bool `json:"simulated,omitempty"`
	// MemoryKind and Devices are a device plugin's: the memory its
	// devices hold and their names.
	MemoryKind string   `json:"memory_kind,omitempty"`
	Devices    []string `json:"devices,omitempty"`
}

// hidden says why the listing of a directory leaves r out without
// --all: "test tool", "simulated device", or "" to list it.
func (r pluginReport) hidden() string {
	switch {
	case r.TestTool:
		return "test tool"
	case r.Simulated:
		return "simulated device"
	}
	return ""
}

// inspect starts one plugin, asks it what it is and whether it can run
// here and, with start (a config's plugin block), whether it takes its
// settings, and stops it.
func inspect(ctx context.Context, spec loader.Spec, start *sdk.StartConfig) pluginReport {
	r := pluginReport{Name: spec.Name, Kind: sdk.KindTransport, Path: spec.Path}
	p, err := loader.Start(ctx, spec, nil)
	if err != nil {
		r.Reason, r.Failed = err.Error(), true
		return r
	}
	defer p.Kill()
	r.SHA256, r.Version, r.Protocol, r.TestTool, r.SameMachineOnly = p.SHA256, p.Info.Version, p.Protocol, p.Info.TestTool, p.Info.SameMachineOnly
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
		rails, note, err := checkSettings(cctx, p.Client, *start)
		if err != nil {
			r.Config, r.Failed = err.Error(), true
			r.Reason = "its settings are refused: " + err.Error()
		} else {
			r.Config, r.RailsNote = "ok", note
			if note == "" {
				r.Rails = r.Rails[:0]
				for _, rl := range rails {
					r.Rails = append(r.Rails, rl.Name)
				}
			}
		}
	}
	return r
}

// checkSettings has the plugin decode start's block and returns the
// rails it has with it. CheckConfig, where the plugin implements
// sdk.ConfigChecker, judges the block without starting anything; then
// Start, which also reads it, Probe for the rails the block configures
// (a tcp block's listen addresses) and Stop. A Start that fails after
// CheckConfig took the block (an address another process holds) leaves
// the settings ok and the rails unknown, as note says. The plugin's error
// names file:line:col in the operator's file.
func checkSettings(ctx context.Context, c *pluginclient.Client, start sdk.StartConfig) (rails []sdk.Rail, note string, err error) {
	err = c.CheckConfig(ctx, start)
	checked := err == nil
	if !checked && !errors.Is(err, pluginclient.ErrUnimplemented) {
		return nil, "", err
	}
	if _, err := c.Start(ctx, start); err != nil {
		if checked {
			return nil, "the configured rails are not known: the plugin took its block but could not start here (" + err.Error() + ")", nil
		}
		return nil, "", err
	}
	defer c.Stop(ctx)
	pr, err := c.Probe(ctx)
	if err != nil || !pr.Available {
		return nil, fmt.Sprintf("the configured rails are not known: asked after start, the plugin answered %v, %s", err, pr.Reason), nil
	}
	return pr.Rails, "", nil
}

// inspectDevices starts each device plugin of cfg with its block, as an
// engine would on first use of device memory, and reports what it drives;
// with settings, the blocks are the operator's, and one that a plugin
// took is reported as such (a plugin without its hardware is not
// started, so its block is not checked).
func inspectDevices(ctx context.Context, cfg *config.Config, settings bool) []pluginReport {
	var out []pluginReport
	for _, d := range host.ProbeDevices(ctx, cfg) {
		r := pluginReport{Name: d.Name, Kind: sdk.KindDevice, Path: d.Path, Available: d.Available, Reason: d.Reason,
			Failed: d.Failed, Simulated: d.Simulated, MemoryKind: string(d.Kind)}
		if sum, err := loader.FileSHA256(d.Path); err == nil {
			r.SHA256 = sum
		}
		for _, a := range d.Devices {
			r.Devices = append(r.Devices, fmt.Sprintf("%d: %s", a.Index, a.Name))
		}
		if settings && d.Available && !d.Failed {
			r.Config = "ok"
		}
		out = append(out, r)
	}
	return out
}

// startConfig is the StartConfig an engine of cfg gives plugin block pc.
func startConfig(cfg *config.Config, pc config.Plugin) *sdk.StartConfig {
	return &sdk.StartConfig{Engine: cfg.Name, MachineID: cfg.MachineID, Config: pc.Body, ConfigFile: pc.BodyFile,
		ConfigLine: pc.BodyLine, ConfigColumn: pc.BodyColumn, ConfigByte: pc.BodyByte}
}

func cmdPlugins(args []string) error {
	fs := flag.NewFlagSet("plugins", flag.ExitOnError)
	cfgPath := fs.String("config", "", "HCL config file: list its plugin and device blocks, each started with its block's settings (default: every ferry-plugin-* and ferry-device-* in --dir)")
	dir := fs.String("dir", "", "plugin directory (default: beside the ferry binary)")
	all := fs.Bool("all", false, "also list the plugins of --dir that are for tests: those that declare themselves test tools (fault) and simulated devices (simdev)")
	asJSON := fs.Bool("json", false, "one JSON object per plugin")
	engine := fs.String("engine", "", "report a running engine's plugins and rails instead: its control address (host:port, as \"ferry run\" prints in its ready line), or its name, looked up in --config's metastore; with a cluster secret, give the engine's --config too")
	fs.Parse(args)
	if *engine != "" {
		var o control.Options
		var meta *config.Metastore
		var cfg *config.Config
		var err error
		if *cfgPath != "" {
			if cfg, err = loadConfig(*cfgPath, "", ""); err != nil {
				return err
			}
			meta = &cfg.Metastore
		}
		if o.Secret, err = dialSecret(cfg); err != nil {
			return err
		}
		addr, err := resolveEngine(context.Background(), *engine, meta, *cfgPath, o.Secret)
		if err != nil {
			return err
		}
		return engineStatus(addr, o, *asJSON)
	}

	// With --config every block is listed, test tools too: the operator
	// named them. A directory is a discovery, and hides those unless --all.
	var cfg *config.Config
	var starts []*sdk.StartConfig
	var specs []loader.Spec
	if *cfgPath != "" {
		var err error
		if cfg, err = loadConfig(*cfgPath, "", ""); err != nil {
			return err
		}
		if *dir != "" {
			cfg.PluginDir = *dir
		}
		for _, p := range cfg.Plugins {
			specs = append(specs, loader.Spec{Name: p.Name, Path: loader.Resolve(p.Name, p.Path, cfg.PluginDir, filepath.Dir(cfg.File)), SHA256: p.SHA256})
			starts = append(starts, startConfig(cfg, p))
		}
	} else {
		d := *dir
		if d == "" {
			d = loader.DefaultDir()
		}
		cfg = &config.Config{Name: "ferry-plugins", MachineID: config.DefaultMachineID()}
		for _, m := range globSorted(d, loader.BinaryPrefix) {
			specs = append(specs, loader.Spec{Name: strings.TrimPrefix(filepath.Base(m), loader.BinaryPrefix), Path: m})
		}
		for _, m := range globSorted(d, loader.DevicePrefix) {
			cfg.Devices = append(cfg.Devices, config.Plugin{Name: strings.TrimPrefix(filepath.Base(m), loader.DevicePrefix), Path: m, Enabled: true})
		}
		if len(specs)+len(cfg.Devices) == 0 {
			return fmt.Errorf("no %s* or %s* binaries in %s: run `make build` or pass --dir", loader.BinaryPrefix, loader.DevicePrefix, d)
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
	reports = append(reports, inspectDevices(ctx, cfg, *cfgPath != "")...)
	var shown, hidden []pluginReport
	for _, r := range reports {
		if *cfgPath == "" && !*all && r.hidden() != "" {
			hidden = append(hidden, r)
		} else {
			shown = append(shown, r)
		}
	}
	if err := printReports(shown, hidden, *asJSON); err != nil {
		return err
	}
	var failed []string
	for _, r := range shown {
		if r.Failed {
			failed = append(failed, r.Name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d plugins cannot be started (%s): see their reason above", len(failed), len(shown), strings.Join(failed, ", "))
	}
	return nil
}

// globSorted returns the files of dir whose names start with prefix, in
// order.
func globSorted(dir, prefix string) []string {
	m, _ := filepath.Glob(filepath.Join(dir, prefix+"*"))
	sort.Strings(m)
	return m
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

// printReports writes reports as tables, transports then devices, and
// names the hidden ones after them; or as JSON lines of the shown ones.
func printReports(reports, hidden []pluginReport, asJSON bool) error {
	if asJSON {
		return jsonLines(reports)
	}
	var transports, devices []pluginReport
	for _, r := range reports {
		if r.Kind == sdk.KindDevice {
			devices = append(devices, r)
		} else {
			transports = append(transports, r)
		}
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	if len(transports) > 0 {
		fmt.Fprintln(tw, "PLUGIN\tVERSION\tPROTOCOL\tSHA256\tPROBE\tPATH")
		for _, r := range transports {
			probe := probeWords(r, r.Rails)
			if r.TestTool {
				probe += " (test tool)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", r.Name, r.Version, r.Protocol, shortSum(r.SHA256), probe, r.Path)
		}
	}
	if len(devices) > 0 {
		if len(transports) > 0 {
			fmt.Fprintln(tw)
		}
		fmt.Fprintln(tw, "DEVICE PLUGIN\tMEMORY\tSHA256\tPROBE\tPATH")
		for _, r := range devices {
			probe := probeWords(r, r.Devices)
			if r.Simulated {
				probe += " (simulated)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Name, r.MemoryKind, shortSum(r.SHA256), probe, r.Path)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(hidden) > 0 {
		var names []string
		for _, r := range hidden {
			names = append(names, r.Name+" ("+r.hidden()+")")
		}
		fmt.Printf("\nnot listed: %s; --all lists them\n", strings.Join(names, ", "))
	}
	return nil
}

// probeWords says what r's probe found: failed, unavailable, or
// available with what it reaches (rails, devices), and whether its
// settings were taken.
func probeWords(r pluginReport, what []string) string {
	probe := "available"
	switch {
	case r.Failed:
		probe = "FAILED: " + r.Reason
	case !r.Available:
		probe = "unavailable: " + r.Reason
	case len(what) > 0:
		probe += " (" + strings.Join(what, ", ") + ")"
	}
	if r.Config == "ok" {
		probe += ", settings ok"
	}
	return probe
}

func shortSum(sum string) string {
	if len(sum) > 16 {
		return sum[:16] + "…"
	}
	return sum
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
		return fmt.Errorf("%w; is an engine serving its control service at %s? %s", err, addr, secretHint)
	}
	if asJSON {
		_, err := fmt.Println(string(b))
		return err
	}
	st, err := decodeStatus(b, addr)
	if err != nil {
		return err
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
