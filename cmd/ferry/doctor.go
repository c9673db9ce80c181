package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	hclog "github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/cmd/ferry/internal/cpuprobe"
	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/host/topology"
	"github.com/ferrydev/ferry/internal/cpuslice"
	"github.com/ferrydev/ferry/sdk/memcpy"
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
	plugins, reports := pluginFindings(ctx, cfg)
	out = append(out, plugins...)
	out = append(out, deviceFindings(ctx, cfg)...)
	out = append(out, metastoreFinding(ctx, cfg))
	out = append(out, hostFindings(os.ReadFile)...)
	out = append(out, cpuFinding(), copyFinding(memcpy.Current()), sliceFinding(probeSlice()))
	if *peer != "" {
		log, err := lf.logger()
		if err != nil {
			return err
		}
		out = append(out, peerFindings(ctx, cfg, *peer, reports, log)...)
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
	return writeFindings(os.Stdout, out, outputWidth(os.Stdout))
}

// outputWidth is the width of the terminal f is, else $COLUMNS, else 0:
// no limit (a pipe or a file keeps each finding on its lines).
func outputWidth(f *os.File) int {
	if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
		return int(ws.Col)
	}
	n, _ := strconv.Atoi(os.Getenv("COLUMNS"))
	return max(n, 0)
}

// writeFindings writes out as a table whose DETAIL column is wrapped to
// width (0: not wrapped) and whose continuation lines, the fix and the
// lines of a detail that has several, are indented to that column: the
// table stays aligned whatever the detail holds, where a terminal that
// wrapped the line, or a newline inside a cell, would break it.
func writeFindings(w io.Writer, out []finding, width int) error {
	cols := [3]int{len("AREA"), len("ITEM"), len("STATUS")}
	for _, f := range out {
		for i, c := range [3]string{f.Area, f.Item, f.Status} {
			cols[i] = max(cols[i], utf8.RuneCountInString(c))
		}
	}
	indent := cols[0] + cols[1] + cols[2] + 3*2
	text := 0 // no wrapping; and where the terminal leaves too little beside the columns
	if width-indent >= 30 {
		text = width - indent
	}
	pad := func(s string, n int) string { return s + strings.Repeat(" ", n-utf8.RuneCountInString(s)+2) }
	var b strings.Builder
	row := func(area, item, status string, lines []string) {
		for i, l := range lines {
			if i == 0 {
				b.WriteString(pad(area, cols[0]) + pad(item, cols[1]) + pad(status, cols[2]))
			} else {
				b.WriteString(strings.Repeat(" ", indent))
			}
			b.WriteString(strings.TrimRight(l, " ") + "\n")
		}
	}
	row("AREA", "ITEM", "STATUS", []string{"DETAIL"})
	for _, f := range out {
		row(f.Area, f.Item, strings.ToUpper(f.Status), wrapText(f.Detail, text))
		if f.Fix != "" {
			fix := wrapText(f.Fix, max(text-3, 0))
			for i := range fix {
				if i == 0 {
					fix[i] = "-> " + fix[i]
				} else {
					fix[i] = "   " + fix[i]
				}
			}
			row("", "", "", fix)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// wrapText cuts s into lines at its newlines and, with width > 0, at the
// last space before width runes; a word longer than width keeps its line.
func wrapText(s string, width int) []string {
	var out []string
	for _, para := range strings.Split(s, "\n") {
		line := ""
		for _, word := range strings.Fields(para) {
			switch {
			case line == "":
				line = word
			case width > 0 && utf8.RuneCountInString(line)+1+utf8.RuneCountInString(word) > width:
				out = append(out, line)
				line = word
			default:
				line += " " + word
			}
		}
		out = append(out, line)
	}
	return out
}

// pluginFindings starts each enabled plugin of cfg alone, as `ferry
// plugins` does: binary, sha256, handshake, probe, and its block's
// settings with the rails they configure. It returns the reports too,
// by plugin name.
func pluginFindings(ctx context.Context, cfg *config.Config) ([]finding, map[string]pluginReport) {
	dir := ""
	if cfg.File != "" {
		dir = cfg.File[:strings.LastIndex(cfg.File, "/")+1]
	}
	var out []finding
	reports := map[string]pluginReport{}
	for _, p := range cfg.Plugins {
		if !p.Enabled {
			continue
		}
		r := inspect(ctx, loader.Spec{Name: p.Name, Path: loader.Resolve(p.Name, p.Path, cfg.PluginDir, dir), SHA256: p.SHA256}, startConfig(cfg, p))
		reports[p.Name] = r
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
			switch {
			case r.RailsNote != "":
				f.Detail += "; " + r.RailsNote
			case len(r.Rails) > 0:
				f.Detail += ", rails " + strings.Join(r.Rails, " ")
			}
			if r.SameMachineOnly {
				f.Detail += " (same machine only)"
			}
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		out = append(out, finding{Area: "plugin", Item: "-", Status: statusFail, Detail: "no plugin is enabled", Fix: "enable at least one transport plugin block"})
	}
	return out, reports
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
	b, err := metastore.Open(cctx, metastoreOptions(m))
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

// cpuFinding measures the round trip of a cache line from the first CPU
// this process may use to each of up to seven others (cpuprobe).
func cpuFinding() finding {
	cpus, err := cpuprobe.Allowed()
	if err != nil {
		return coreFinding(nil, 0, err)
	}
	pairs, err := cpuprobe.Survey(cpus, 7, 20000, 2*time.Second)
	return coreFinding(pairs, len(cpus), err)
}

// farLine is the cache line round trip from which doctor says what it
// costs small requests: a pair of cores that share a cache moves a line
// there and back in a few hundred nanoseconds or less.
const farLine = 500 * time.Nanosecond

// coreFinding reports the round trips between CPUs that cpuFinding
// measured (ncpu: the CPUs the process may use). Every small request
// crosses from the engine to a plugin process and back, so the round
// trip between their CPUs is a floor under its latency.
func coreFinding(pairs []cpuprobe.Pair, ncpu int, err error) finding {
	f := finding{Area: "cpu", Item: "core-to-core round trip", Status: statusInfo}
	switch {
	case ncpu == 1:
		f.Status, f.Detail = statusWarn, "this process may use one CPU: the engine and its plugins take turns on it, and every small request waits on context switches"
		f.Fix = "give the engine at least two CPUs (taskset, a cpuset, the container's cpus); its plugins run on the engine's CPUs"
		return f
	case len(pairs) == 0 && err != nil:
		f.Detail = "not measured: " + err.Error()
		return f
	case len(pairs) == 0:
		f.Detail = "not measured on this system"
		return f
	}
	lo, hi := pairs[0], pairs[0]
	for _, p := range pairs {
		if p.RTT < lo.RTT {
			lo = p
		}
		if p.RTT > hi.RTT {
			hi = p
		}
	}
	ns := func(d time.Duration) string { return fmt.Sprintf("%d ns", d.Nanoseconds()) }
	if len(pairs) == 1 {
		f.Detail = fmt.Sprintf("a cache line from CPU %d to CPU %d and back: %s", lo.A, lo.B, ns(lo.RTT))
	} else {
		f.Detail = fmt.Sprintf("a cache line from CPU %d to %d others and back: %s (CPU %d) to %s (CPU %d)", lo.A, len(pairs), ns(lo.RTT), lo.B, ns(hi.RTT), hi.B)
	}
	if err != nil {
		f.Detail += "; then " + err.Error()
	}
	switch {
	case lo.RTT >= farLine:
		f.Detail += ": a small request goes from the engine's CPU to a plugin's and back, so it costs about one such round trip more than an in-process copy (docs/performance.md)"
		f.Fix = "on a VM the host places the vCPUs: ask for vCPUs that share a cache (one socket, one chiplet); on a host, run the engine on CPUs of one cache domain (taskset, a cpuset)"
	case hi.RTT >= farLine:
		f.Detail += ": a small request between the engine and a plugin on far CPUs pays the larger figure (docs/performance.md)"
		f.Fix = "run the engine on CPUs that share a cache (taskset, a cpuset); its plugins run on the engine's CPUs"
	}
	return f
}

// probeSlice asks for the shortest slice on doctor's own threads and
// gives it back: cpuslice.Hold's answer, as an engine would get it.
func probeSlice() error {
	err := cpuslice.Hold(cpuslice.Min)
	if err == nil {
		cpuslice.Release()
	}
	return err
}

// sliceFinding says whether the kernel takes the time slice an engine
// asks for its threads (transfer.cpu_slice), from probeSlice's answer.
func sliceFinding(probe error) finding {
	f := finding{Area: "cpu", Item: "scheduler time slice", Status: statusOK}
	switch {
	case probe == nil:
		f.Detail = "the kernel takes a thread's own slice: an engine asks 100 µs for its threads (transfer.cpu_slice), so a waiter its plugin wakes runs at once beside busy processes"
	case errors.Is(probe, cpuslice.ErrUnsupported):
		f.Status = statusInfo
		f.Detail = "the kernel keeps no thread's own slice (Linux 6.12 and later do): beside busy processes a woken waiter may wait out their slice, up to a scheduler tick (docs/performance.md)"
		f.Fix = "on hosts shared with CPU-bound work, run Linux 6.12 or later"
	default:
		f.Status, f.Detail = statusInfo, "not measured: "+probe.Error()
	}
	return f
}

// copyFinding says how the shm plugin (which copies with sdk/memcpy, on
// this machine's CPUs) copies a request's bytes.
func copyFinding(r memcpy.Routine) finding {
	f := finding{Area: "cpu", Item: "same-machine copy", Status: statusInfo}
	switch {
	case r.CachedMax == 0:
		f.Detail = "Go's copy (no cache-keeping copy on this architecture)"
	case r.Rep:
		f.Detail = fmt.Sprintf("copies of %s to %s with REP MOVSB (the CPU reports ERMS and FSRM), larger ones with non-temporal stores", sizeText(uint64(r.RepFrom)), sizeText(uint64(r.CachedMax)))
	default:
		f.Detail = fmt.Sprintf("copies up to %s in cached pieces under 1 MiB, larger ones with non-temporal stores; no REP MOVSB (the CPU does not report both ERMS and FSRM)", sizeText(uint64(r.CachedMax)))
	}
	return f
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
// the peer's first remotely readable buffer over every transport that
// can reach it and then over each of those transports' local rails on
// its own, each pinned by a policy made for the purpose: each line says
// whether that path really carried bytes. A transport that cannot reach
// the peer by its nature is not tried, and its line says why: a
// same-machine transport (shm, nvlink; reports say which) and a peer on
// another machine (the machine ids the engines publish differ: they
// derive from /etc/machine-id, the boot id and the network namespace), a
// transport the peer does not run, one not running here.
func peerFindings(ctx context.Context, cfg *config.Config, peer string, reports map[string]pluginReport, log hclog.Logger) []finding {
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
	st := e.Status(ctx, host.SkipPluginCounters())
	reach := peerReach(st, seg, reports)
	try := func(item string, r host.Request, fix string) finding {
		r.Op, r.Local, r.Segment, r.Remote = host.Read, buf, seg.ID, remote
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		if err := e.Transfer(tctx, r); err != nil {
			return finding{Area: "peer", Item: item, Status: statusFail, Detail: "unreachable: " + err.Error(), Fix: fix}
		}
		return finding{Area: "peer", Item: item, Status: statusOK, Detail: fmt.Sprintf("read 4 KiB from %s in %s", peer, time.Since(start).Round(time.Microsecond))}
	}
	var out []finding
	for _, t := range reach {
		if t.skip != "" {
			out = append(out, finding{Area: "peer", Item: "transport " + t.name, Status: t.status, Detail: t.skip, Fix: t.fix})
			continue
		}
		out = append(out, try("transport "+t.name, host.Request{Transport: t.name},
			fmt.Sprintf("check the links, routes and firewall between this machine's %s rails and %s's (%s)", t.name, seg.Name, peerRails(seg, t.name))))
	}
	for i, r := range rails {
		if !slices.Contains(seg.Transports, r.Transport) {
			continue // its transport's line says why
		}
		f := try(fmt.Sprintf("rail %s %s", r.Transport, r.Name), host.Request{Transport: r.Transport, Policy: fmt.Sprintf("doctor-rail-%d", i)},
			fmt.Sprintf("check the link, routes and firewall between this rail (%s) and %s's %s rails (%s)", r.Name, seg.Name, r.Transport, peerRails(seg, r.Transport)))
		if f.Status == statusFail {
			if link := linkState(r.Name); link != "" {
				f.Detail = link + "; " + f.Detail
			}
		}
		out = append(out, f)
	}
	return out
}

// linkState says "interface X (addr) is down" when rail, a host:port
// rail name (tcp's), is an address of an interface of this machine that
// is not up and running; "" otherwise.
func linkState(rail string) string {
	h, _, err := net.SplitHostPort(rail)
	ip := net.ParseIP(h)
	if err != nil || ip == nil {
		return ""
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifs {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) && ifc.Flags&(net.FlagUp|net.FlagRunning) != net.FlagUp|net.FlagRunning {
				return fmt.Sprintf("interface %s (%s) is down", ifc.Name, h)
			}
		}
	}
	return ""
}

// transportReach is one local transport as doctor --peer sees it: tried
// (skip ""), or not, and why, with the line's status.
type transportReach struct {
	name, skip, fix string
	status          string
}

// peerReach says, for each transport of the engine st, whether it can
// reach seg (an open segment, whose Transports are those the engine
// opened to it), and why not: a pure function of what the engines
// published and the plugins declared (reports).
func peerReach(st host.EngineStatus, seg host.Segment, reports map[string]pluginReport) []transportReach {
	var out []transportReach
	for _, p := range st.Plugins {
		t := transportReach{name: p.Name, status: statusInfo}
		_, offered := seg.Rails[p.Name]
		switch {
		case slices.Contains(seg.Transports, p.Name):
		case p.State != "running":
			t.skip = fmt.Sprintf("not tried: %s is %s here (see its plugin line)", p.Name, p.State)
		case reports[p.Name].SameMachineOnly && seg.MachineID != st.MachineID:
			t.skip = fmt.Sprintf("not tried: %s reaches only engines on this machine (the same boot and network namespace), and %s is on another: machine id %.12s…, this engine's %.12s…",
				p.Name, seg.Name, seg.MachineID, st.MachineID)
		case !offered:
			t.skip = fmt.Sprintf("not tried: %s does not run %s", seg.Name, p.Name)
		default:
			t.status, t.skip = statusFail, fmt.Sprintf("%s runs on both engines, but this one could not open %s over it", p.Name, seg.Name)
			t.fix = "run ferry explain --segment " + seg.Name + " --transport " + p.Name + " --log-level debug for the plugin's reason"
		}
		out = append(out, t)
	}
	return out
}

// peerRails lists seg's rails of transport, as it published them.
func peerRails(seg host.Segment, transport string) string {
	var names []string
	for _, r := range seg.Rails[transport] {
		names = append(names, r.Name)
	}
	if len(names) == 0 {
		return "none published"
	}
	return strings.Join(names, ", ")
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
