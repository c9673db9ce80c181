package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/host/topology"
)

// finding is one line of `ferry doctor`: what was checked, what was
// found and, when something is wrong, what to do.
type finding struct {
	Area   string `json:"area"`
	Item   string `json:"item"`
	Status string `json:"status"` // ok, info, warn, fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

const (
	statusOK   = "ok"
	statusInfo = "info"
	statusWarn = "warn"
	statusFail = "fail"
)

func cmdDoctor(args []string) error {
	fs := flag.NewFlagSet("doctor", flag.ExitOnError)
	cfgPath := fs.String("config", "", "the engine's HCL config (default: the built-in single-node config)")
	peer := fs.String("peer", "", "also try every local rail against this segment (a name in the config's metastore, or a control host:port)")
	asJSON := fs.Bool("json", false, "one JSON object per finding")
	lf := addLogFlags(fs)
	fs.Parse(args)
	name := fmt.Sprintf("doctor-%d", os.Getpid())
	cfg, err := loadConfig(*cfgPath, name, "")
	if err != nil {
		return err
	}
	cfg.Name = name
	ctx := context.Background()
	var out []finding
	out = append(out, pluginFindings(ctx, cfg)...)
	out = append(out, deviceFindings(ctx, cfg)...)
	out = append(out, metastoreFinding(ctx, cfg))
	out = append(out, hostFindings(os.ReadFile)...)
	if *peer != "" {
		log, err := lf.logger()
		if err != nil {
			return err
		}
		out = append(out, peerFindings(ctx, cfg, *peer, log)...)
	}
	if err := printFindings(out, *asJSON); err != nil {
		return err
	}
	var failed int
	for _, f := range out {
		if f.Status == statusFail {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks failed", failed, len(out))
	}
	return nil
}

func printFindings(out []finding, asJSON bool) error {
	if asJSON {
		return jsonLines(out)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AREA\tITEM\tSTATUS\tDETAIL")
	for _, f := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Area, f.Item, strings.ToUpper(f.Status), f.Detail)
		if f.Fix != "" {
			fmt.Fprintf(tw, "\t\t\t-> %s\n", f.Fix)
		}
	}
	return tw.Flush()
}

// pluginFindings starts each enabled plugin of cfg alone, as `ferry
// plugins` does: binary, sha256, handshake and probe.
func pluginFindings(ctx context.Context, cfg *config.Config) []finding {
	dir := ""
	if cfg.File != "" {
		dir = cfg.File[:strings.LastIndex(cfg.File, "/")+1]
	}
	var out []finding
	for _, p := range cfg.Plugins {
		if !p.Enabled {
			continue
		}
		r := inspect(ctx, loader.Spec{Name: p.Name, Path: loader.Resolve(p.Name, p.Path, cfg.PluginDir, dir), SHA256: p.SHA256}, startConfig(cfg, p))
		f := finding{Area: "plugin", Item: p.Name}
		switch {
		case r.Failed:
			f.Status, f.Detail = statusFail, r.Reason
			f.Fix = "build the plugins (make build), point plugin_dir or the block's path at them, correct sha256 or the block's settings; or disable the block (enabled = false)"
		case !r.Available:
			f.Status, f.Detail = statusWarn, "unavailable: "+r.Reason
			f.Fix = "this machine lacks what the plugin drives; the engine runs without it"
		default:
			f.Status = statusOK
			f.Detail = fmt.Sprintf("%s, protocol %d, sha256 %.16s…, %s", r.Version, r.Protocol, r.SHA256, r.Path)
			if len(r.Rails) > 0 {
				f.Detail += ", rails " + strings.Join(r.Rails, " ")
			}
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		out = append(out, finding{Area: "plugin", Item: "-", Status: statusFail, Detail: "no plugin is enabled", Fix: "enable at least one transport plugin block"})
	}
	return out
}

// deviceFindings starts each enabled device plugin of cfg alone and
// reports what it drives: a GPU machine's devices, or why there are none
// (a warning: the engine runs on host memory without them).
func deviceFindings(ctx context.Context, cfg *config.Config) []finding {
	var out []finding
	for _, p := range host.ProbeDevices(ctx, cfg) {
		f := finding{Area: "device", Item: p.Name}
		switch {
		case p.Failed:
			f.Status, f.Detail = statusFail, p.Reason
			f.Fix = "build the device plugins (make build), point plugin_dir or the block's path at them; or disable the block (enabled = false)"
		case !p.Available:
			f.Status, f.Detail = statusWarn, "unavailable: "+p.Reason
			f.Fix = "this machine lacks the driver or device; GPU memory of this kind cannot be registered, host memory moves as before"
		default:
			f.Status = statusOK
			var devs []string
			for _, d := range p.Devices {
				devs = append(devs, fmt.Sprintf("%d: %s, %s, numa %d", d.Index, d.Name, sizeText(d.Memory), d.NUMANode))
			}
			kind := string(p.Kind)
			if p.Simulated {
				kind += " (simulated)"
			}
			f.Detail = fmt.Sprintf("%s, %d devices [%s], %s", kind, len(p.Devices), strings.Join(devs, "; "), p.Path)
		}
		out = append(out, f)
	}
	return out
}

// metastoreFinding opens the configured metastore and reads a key that
// does not exist: reachable and answering, or why not.
func metastoreFinding(ctx context.Context, cfg *config.Config) finding {
	m := cfg.Metastore
	f := finding{Area: "metastore", Item: m.Kind}
	switch m.Kind {
	case config.MetastoreEmbedded:
		f.Status, f.Detail = statusOK, "embedded: the engine serves it on "+m.Listen
		return f
	case config.MetastoreNone:
		f.Status, f.Detail = statusInfo, "none: peers are opened by control address or imported descriptors"
		return f
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	b, err := metastore.Open(cctx, metastore.Options{
		Kind: m.Kind, URL: m.URL, Address: m.Address, Endpoints: m.Endpoints, Username: m.Username, Password: m.Password,
		Database: m.Database, TLS: m.TLS, CAFile: m.CAFile,
	})
	if err == nil {
		defer b.Close()
		_, err = b.Get(cctx, m.KeyPrefix()+"ferry-doctor-probe")
		if errors.Is(err, metastore.ErrNotFound) {
			err = nil
		}
	}
	if err != nil {
		f.Status, f.Detail = statusFail, err.Error()
		f.Fix = "start the metastore, or correct its address and credentials in the metastore block"
		return f
	}
	f.Status, f.Detail = statusOK, fmt.Sprintf("answered a read in %s", time.Since(start).Round(time.Microsecond))
	return f
}

// hostFindings checks what the machine gives Ferry: shared memory,
// locked memory, ptrace scope, huge pages, NUMA, NICs and the clock.
func hostFindings(read func(string) ([]byte, error)) []finding {
	var out []finding
	var st unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &st); err == nil {
		out = append(out, shmFinding(uint64(st.Blocks)*uint64(st.Bsize), uint64(st.Bavail)*uint64(st.Bsize)))
	} else {
		out = append(out, finding{Area: "memory", Item: "/dev/shm", Status: statusInfo, Detail: "not mounted (" + err.Error() + "); Ferry's memory is memfd and does not need it"})
	}
	var ml unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_MEMLOCK, &ml); err == nil {
		out = append(out, memlockFinding(ml.Cur, ml.Max))
	}
	scope, err := read("/proc/sys/kernel/yama/ptrace_scope")
	out = append(out, ptraceFinding(strings.TrimSpace(string(scope)), err))
	thp, _ := read("/sys/kernel/mm/transparent_hugepage/enabled")
	shmem, _ := read("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
	out = append(out, thpFinding(string(thp), string(shmem)))
	out = append(out, topologyFindings(topology.Discover(topology.Root, nil))...)
	cs, _ := read("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	out = append(out, clockFinding(strings.TrimSpace(string(cs))))
	return out
}

func shmFinding(size, avail uint64) finding {
	f := finding{Area: "memory", Item: "/dev/shm", Status: statusInfo,
		Detail: fmt.Sprintf("%s, %s free; Ferry allocates memfd memory, which counts against the memory cgroup, not /dev/shm", sizeText(size), sizeText(avail))}
	return f
}

func memlockFinding(cur, max uint64) finding {
	f := finding{Area: "memory", Item: "memlock ulimit", Status: statusOK}
	text := func(v uint64) string {
		if v == unix.RLIM_INFINITY {
			return "unlimited"
		}
		return sizeText(v)
	}
	f.Detail = fmt.Sprintf("soft %s, hard %s", text(cur), text(max))
	if cur != unix.RLIM_INFINITY && cur < 64<<20 {
		f.Status = statusWarn
		f.Detail += ": RDMA and GPU plugins pin registered memory and need it at least as large as what they register"
		f.Fix = "raise it (ulimit -l unlimited, LimitMEMLOCK=infinity in a systemd unit, or --ulimit memlock=-1 in a container)"
	}
	return f
}

// ptraceFinding says what Yama's ptrace scope allows for cross-memory
// attach, by which plugins reach memory the application registered
// without allocating it through Ferry.
func ptraceFinding(scope string, err error) finding {
	f := finding{Area: "kernel", Item: "ptrace scope"}
	switch {
	case err != nil && errors.Is(err, os.ErrNotExist):
		f.Status, f.Detail = statusOK, "no Yama: plugins of the same user may attach to the engine's memory (application-owned memory works)"
	case err != nil:
		f.Status, f.Detail = statusWarn, "cannot read kernel.yama.ptrace_scope: "+err.Error()
	case scope == "0" || scope == "1":
		f.Status, f.Detail = statusOK, "kernel.yama.ptrace_scope = "+scope+": the engine grants its own plugins access (application-owned memory works)"
	case scope == "2" || scope == "3":
		f.Status, f.Detail = statusWarn, "kernel.yama.ptrace_scope = "+scope+": plugins cannot reach application-owned memory; registering it fails"
		f.Fix = "allocate transfer buffers with Engine.Allocate (zero copy, no ptrace needed), or set kernel.yama.ptrace_scope=1 (sysctl)"
	default:
		f.Status, f.Detail = statusWarn, "kernel.yama.ptrace_scope = "+strconv.Quote(scope)+": unknown value"
	}
	return f
}

// thpFinding reports transparent huge pages: shmem_enabled governs memfd
// memory, which is what Ferry allocates.
func thpFinding(enabled, shmem string) finding {
	sel := func(s string) string {
		if i, j := strings.Index(s, "["), strings.Index(s, "]"); i >= 0 && j > i {
			return s[i+1 : j]
		}
		return strings.TrimSpace(s)
	}
	f := finding{Area: "kernel", Item: "transparent huge pages", Status: statusInfo}
	if enabled == "" {
		f.Detail = "not available on this kernel"
		return f
	}
	f.Detail = "anonymous " + sel(enabled)
	if shmem != "" {
		f.Detail += ", shmem (memfd, Ferry's memory) " + sel(shmem)
		if s := sel(shmem); s == "never" || s == "deny" {
			f.Detail += ": large buffers use 4 KiB pages, more TLB misses on big copies"
			f.Fix = "echo advise > /sys/kernel/mm/transparent_hugepage/shmem_enabled (or within_size) to let large memfd buffers use huge pages"
		}
	}
	return f
}

func topologyFindings(t *segment.Topology) []finding {
	var out []finding
	var nodes []string
	for _, n := range t.NUMANodes {
		nodes = append(nodes, fmt.Sprintf("node%d (cpus %s)", n.ID, n.CPUs))
	}
	f := finding{Area: "topology", Item: "NUMA", Status: statusInfo, Detail: strings.Join(nodes, ", ")}
	if len(nodes) == 0 {
		f.Detail = "no NUMA information in sysfs: one node assumed"
	}
	out = append(out, f)
	var nics []string
	for _, n := range t.NICs {
		s := n.Name
		if n.SpeedMbps > 0 {
			s += fmt.Sprintf(" %d Mb/s", n.SpeedMbps)
		}
		if n.NUMANode >= 0 {
			s += fmt.Sprintf(" node%d", n.NUMANode)
		}
		nics = append(nics, s)
	}
	f = finding{Area: "topology", Item: "NICs", Status: statusInfo, Detail: strings.Join(nics, ", ")}
	if len(nics) == 0 {
		f.Status, f.Detail = statusWarn, "no network interface besides loopback: only same-machine peers are reachable"
	}
	return append(out, f)
}

func clockFinding(source string) finding {
	f := finding{Area: "clock", Item: "clocksource", Status: statusOK, Detail: source + "; now " + time.Now().UTC().Format(time.RFC3339Nano)}
	switch source {
	case "":
		f.Status, f.Detail = statusInfo, "clocksource unknown; now "+time.Now().UTC().Format(time.RFC3339Nano)
	case "tsc", "kvm-clock", "arch_sys_counter":
	default:
		f.Status = statusWarn
		f.Detail += ": a slow clocksource makes every deadline check and latency measurement expensive"
		f.Fix = "use tsc where the CPU has an invariant TSC (clocksource=tsc on the kernel command line)"
	}
	return f
}

// peerFindings starts an engine from cfg, opens peer, and reads 4 KiB of
// the peer's first remotely readable buffer over every transport both
// have and then over every local rail on its own, each pinned by a
// policy made for the purpose: each line says whether that path really
// carried bytes.
func peerFindings(ctx context.Context, cfg *config.Config, peer string, log hclog.Logger) []finding {
	fail := func(item, detail, fix string) []finding {
		return []finding{{Area: "peer", Item: item, Status: statusFail, Detail: detail, Fix: fix}}
	}
	rails, err := probeRails(ctx, cfg, log)
	if err != nil {
		return fail(peer, "cannot start an engine from the config: "+err.Error(), "fix the findings above")
	}
	pc := *cfg
	pc.Policies = nil
	for i, r := range rails {
		pc.Policies = append(pc.Policies, config.Policy{Name: fmt.Sprintf("doctor-rail-%d", i), Transports: []string{r.Transport}, Rails: []string{r.Name}})
	}
	e, err := host.New(ctx, &pc, host.WithLogger(log))
	if err != nil {
		return fail(peer, "cannot start an engine from the config: "+err.Error(), "fix the findings above")
	}
	defer e.Close()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	seg, err := e.OpenSegment(sctx, peer)
	cancel()
	if err != nil {
		return fail(peer, "cannot open the segment: "+err.Error(), "check the peer runs, its name, and that both use one metastore (or give its control host:port)")
	}
	var remote uint64
	for _, b := range seg.Buffers {
		if b.Perm.AllowsRemoteRead() && b.Length >= 4096 {
			remote = b.Base
			break
		}
	}
	if remote == 0 {
		return fail(peer, "the segment exposes no remotely readable buffer of 4 KiB to read", "run the peer with --expose, or register memory RemoteRead")
	}
	buf, err := e.Allocate(4096)
	if err != nil {
		return fail(peer, err.Error(), "")
	}
	if _, err := e.Register(ctx, buf, host.LocalOnly); err != nil {
		return fail(peer, err.Error(), "")
	}
	try := func(area, item string, r host.Request) finding {
		r.Op, r.Local, r.Segment, r.Remote = host.Read, buf, seg.ID, remote
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := e.Transfer(tctx, r); err != nil {
			return finding{Area: area, Item: item, Status: statusFail, Detail: "unreachable: " + err.Error(),
				Fix: "check the link, routes and firewall between this rail's address and the peer's"}
		}
		return finding{Area: area, Item: item, Status: statusOK, Detail: fmt.Sprintf("read 4 KiB from %s in %s", peer, time.Since(start).Round(time.Microsecond))}
	}
	var out []finding
	for _, t := range seg.Transports {
		out = append(out, try("peer", "transport "+t, host.Request{Transport: t}))
	}
	for i, r := range rails {
		out = append(out, try("peer", fmt.Sprintf("rail %s %s", r.Transport, r.Name), host.Request{Transport: r.Transport, Policy: fmt.Sprintf("doctor-rail-%d", i)}))
	}
	return out
}

// probeRails starts an engine from cfg to learn its rails' names, which
// the plugins choose.
func probeRails(ctx context.Context, cfg *config.Config, log hclog.Logger) ([]host.RailStatus, error) {
	e, err := host.New(ctx, cfg, host.WithLogger(log))
	if err != nil {
		return nil, err
	}
	defer e.Close()
	return e.Status(ctx, host.SkipPluginCounters()).Rails, nil
}

func sizeText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
