package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// benchRow is one line of `ferry bench` output; with --json, one object.
type benchRow struct {
	Transport string  `json:"transport"`
	Op        string  `json:"op"`
	BlockSize int64   `json:"block_size"`
	Batch     int     `json:"batch"`
	Threads   int     `json:"threads"`
	Bytes     uint64  `json:"bytes"`
	Seconds   float64 `json:"seconds"`
	Gbps      float64 `json:"gbps"` // 10^9 bytes per second
	P50us     float64 `json:"p50_us"`
	P99us     float64 `json:"p99_us"`
	P999us    float64 `json:"p999_us"`
	// SubmitP50us and WaitP50us split a batch's time: the median time in
	// Submit, and from Submit's return until Wait's. Engine-bound
	// batches spend it in Submit; the rest wait for the plugins, the
	// wire or the peer.
	SubmitP50us   float64 `json:"submit_p50_us"`
	WaitP50us     float64 `json:"wait_p50_us"`
	Baseline      string  `json:"baseline"`
	BaselineGbps  float64 `json:"baseline_gbps"`
	BaselineP50us float64 `json:"baseline_p50_us"`
	Ratio         float64 `json:"ratio"`         // gbps / baseline_gbps
	LatencyRatio  float64 `json:"latency_ratio"` // p50_us / baseline_p50_us
	// Verified says that after the last round the receiving side of
	// Ferry's transfers, and of the baseline's, held exactly the bytes
	// that round's sources held. A row with false also fails the run.
	Verified bool `json:"verified"`
	// Rails is the initiator's per-rail statistics for the transport at
	// the end of the run, before verification (warm-ups included, and
	// with --target --op read the writes that fill the far buffer).
	Rails []railRow `json:"rails,omitempty"`
	// PluginCounters is the initiator plugin's own counters.
	PluginCounters map[string]uint64 `json:"plugin_counters,omitempty"`
	// CtxSwitchesPerReq is each process's context switches (voluntary
	// and not) per request over Ferry's timed windows: "engine" (the
	// bench's own process), "plugin:<name>" for each of its plugins and,
	// when bench started the far engine, "target" and
	// "target-plugin:<name>". BaselineCtxSwitchesPerReq is the same over
	// the baseline's windows: "bench" and, for tcp, its "peer".
	CtxSwitchesPerReq         map[string]float64 `json:"ctx_switches_per_req,omitempty"`
	BaselineCtxSwitchesPerReq map[string]float64 `json:"baseline_ctx_switches_per_req,omitempty"`
}

type railRow struct {
	Index    int     `json:"index"`
	Name     string  `json:"name"`
	Label    string  `json:"label,omitempty"`
	NUMANode int     `json:"numa_node"`
	Bytes    uint64  `json:"bytes"`
	Slices   uint64  `json:"slices"`
	InFlight uint64  `json:"in_flight"`
	EWMAGbps float64 `json:"ewma_gbps"` // learnt bandwidth, 10^9 bits per second
	Errors   uint64  `json:"errors"`
	Paused   bool    `json:"paused"`
	Share    float64 `json:"share"` // of the bytes all rails carried
}

// result is one measured run: bytes moved, time, per-batch latencies;
// for Ferry's side also each batch's time in Submit and then in Wait.
type result struct {
	bytes        uint64
	seconds      float64
	lat          []time.Duration
	submit, wait []time.Duration
}

func (r *result) add(o result) {
	r.bytes += o.bytes
	r.seconds += o.seconds
	r.lat = append(r.lat, o.lat...)
	r.submit = append(r.submit, o.submit...)
	r.wait = append(r.wait, o.wait...)
}

func (r *result) gbps() float64 {
	if r.seconds == 0 {
		return 0
	}
	return float64(r.bytes) / r.seconds / 1e9
}

func (r *result) pct(p float64) float64 { return percentile(r.lat, p) }

// percentile returns the p-th quantile of ds in microseconds (sorting
// ds), 0 for none.
func percentile(ds []time.Duration, p float64) float64 {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(float64(len(ds)-1) * p)
	return float64(ds[i].Nanoseconds()) / 1e3
}

type benchOpts struct {
	transport string
	op        host.Op
	size      int64
	batch     int
	threads   int
	duration  time.Duration
	// nonce makes this run's patterns differ from any earlier run's.
	nonce uint64
}

// runLoop runs threads workers for d; each repeats one batch and records
// its latency. It returns what they moved.
func runLoop(o benchOpts, d time.Duration, work func(th int) (uint64, error)) (result, error) {
	var mu sync.Mutex
	var res result
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(d)
	for th := range o.threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var local result
			for time.Now().Before(stop) {
				t0 := time.Now()
				n, err := work(th)
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				local.lat = append(local.lat, time.Since(t0))
				local.bytes += n
			}
			mu.Lock()
			res.bytes += local.bytes
			res.lat = append(res.lat, local.lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.seconds = time.Since(start).Seconds()
	return res, firstErr
}

func cmdBench(args []string) error {
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	transport := fs.String("transport", "tcp", "transport plugin to measure")
	opName := fs.String("op", "write", "read or write")
	sizeStr := fs.String("size", "64MiB", "bytes per request (e.g. 4KiB, 64MiB)")
	batch := fs.Int("batch", 1, "requests per batch")
	threads := fs.Int("threads", 1, "concurrent submitters (and baseline streams)")
	duration := fs.Duration("duration", 5*time.Second, "measured time for Ferry and for the baseline each")
	warmup := fs.Duration("warmup", 500*time.Millisecond, "unmeasured warm-up before each measurement")
	asJSON := fs.Bool("json", false, "print one JSON object per row")
	cfgPath := fs.String("config", "", "initiator config (default: built-in)")
	targetName := fs.String("target", "", "measure against this running engine instead of starting one: its name in the metastore (--config's metastore block, or --metastore), or its control address host:port")
	metaURL := fs.String("metastore", "", "the metastore where --target is published, instead of --config's: "+config.MetastoreURLForms)
	noBaseline := fs.Bool("no-baseline", false, "skip the raw baseline")
	policy := fs.String("policy", "", "name this configured policy on every request (its rails restrict the slices)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the initiator (Ferry and baseline rounds) to this file")
	sweep := fs.String("sweep", "", "measure each of these sizes in turn, like 4KiB,64KiB,1MiB,16MiB (\"all\": 4KiB to 64MiB by 4x), one row each")
	plotPath := fs.String("plot", "", "with --sweep: draw throughput and p50 latency against size, Ferry beside its baseline, into this PNG")
	jsonl := fs.String("jsonl", "", "append each row as one JSON line to this file")
	targetCfg := fs.String("target-config", "", "the HCL config of the target engine bench starts (default: --config's, so both run the same plugin, device and staging blocks; \""+builtinConfig+"\": the built-in one)")
	qos := fs.String("qos", "", "run this QoS scenario file (\"default\": the built-in one) instead of one stream: per-class p50/p99/p999, goodput, SLO attainment, Jain's fairness across tenants, isolation leakage")
	lf := addLogFlags(fs)
	fs.Parse(args)
	if *qos != "" {
		return cmdBenchQoS(fs, *qos, *cfgPath, *asJSON, *jsonl, lf)
	}

	size, err := config.ParseSize(*sizeStr)
	if err != nil {
		return err
	}
	o := benchOpts{transport: *transport, size: size, batch: *batch, threads: *threads, duration: *duration,
		nonce: uint64(time.Now().UnixNano())}
	if o.op, err = parseOp(*opName); err != nil {
		return err
	}
	if size <= 0 || o.batch <= 0 || o.threads <= 0 {
		return fmt.Errorf("--size, --batch and --threads must be positive")
	}
	if err := checkTarget(*cfgPath, *metaURL, *targetName); err != nil {
		return err
	}
	run := benchRun{o: o, opName: *opName, cfgPath: *cfgPath, targetCfg: targetConfig(*cfgPath, *targetCfg), target: *targetName, metaURL: *metaURL, policy: *policy,
		noBaseline: *noBaseline, warmup: *warmup, lf: lf}
	sizes := []int64{size}
	if *sweep != "" {
		if sizes, err = parseSizes(*sweep); err != nil {
			return fmt.Errorf("--sweep: %w", err)
		}
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	prog := newBenchProgress(os.Stderr, len(sizes), *lf.format != "json" && *lf.level != "off")
	run.prog = prog
	var rows []benchRow
	var runErr error
	for i, sz := range sizes {
		run.o.size = sz
		prog.startRow(i, sz)
		row, err := run.run()
		if row.Transport == "" { // nothing measured
			prog.clear()
			runErr = err
			break
		}
		rows = append(rows, row)
		prog.rowDone(row, err)
		if perr := emitRow(row, *asJSON, *jsonl); perr != nil {
			return perr
		}
		if err != nil {
			runErr = err
			break
		}
	}
	if !*asJSON && len(rows) > 0 {
		printTable(os.Stdout, rows, len(sizes) > 1)
	}
	if runErr != nil {
		return runErr
	}
	if *plotPath != "" {
		if err := plotSweep(*plotPath, rows); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *plotPath)
	}
	return nil
}

// checkTarget says, before any engine starts, why bench's engine could
// not find target (--target) with cfgPath and metaURL: in a metastore of
// its own (embedded), or with none.
func checkTarget(cfgPath, metaURL, target string) error {
	if target == "" {
		return nil
	}
	cfg, err := loadConfig(cfgPath, "bench-initiator", metaURL)
	if err != nil {
		return err
	}
	if _, port, err := net.SplitHostPort(target); err == nil && port != "0" {
		return nil // a control address: no metastore needed
	}
	whose := "the built-in config's"
	if cfgPath != "" {
		whose = cfgPath + "'s"
	}
	switch cfg.Metastore.Kind {
	case config.MetastoreEmbedded:
		return fmt.Errorf("--target %q: %s metastore is embedded, a new one in bench's own engine, where no target is published: "+
			"pass --metastore with the target's metastore (%s), or a --config whose metastore block is the target's, or the target's control address (host:port) as --target",
			target, whose, config.MetastoreURLForms)
	case config.MetastoreNone:
		return fmt.Errorf("--target %q: %s metastore is \"none\": name the target by its control address (host:port), or pass --metastore with the target's metastore", target, whose)
	}
	return nil
}

// emitRow appends row to the jsonl file when there is one and, with
// asJSON, prints it as one JSON line; the table of rows comes at the
// end (printTable), aligned over all of them.
func emitRow(row benchRow, asJSON bool, jsonl string) error {
	if jsonl != "" {
		f, err := os.OpenFile(jsonl, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		b, _ := json.Marshal(row)
		_, err = f.Write(append(b, '\n'))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("--jsonl %s: %w", jsonl, err)
		}
	}
	if asJSON {
		b, _ := json.Marshal(row)
		fmt.Println(string(b))
	}
	return nil
}

// notApplicable is what a table prints for a figure that was not
// measured (no baseline against a --target) or not learnt (a one-rail
// transport's bandwidth estimate), where 0.000 would read as a
// measurement.
const notApplicable = "n/a"

// printTable writes rows as one table, aligned over all of them (a
// sweep's rows line up with its header); for a single row (not sweep)
// also its rails and the plugin's counters.
func printTable(w io.Writer, rows []benchRow, sweep bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TRANSPORT\tOP\tBLOCK\tBATCH\tTHREADS\tGB/s\tP50 us\tP99 us\tP99.9 us\tCSW/REQ\tBASELINE\tBASE GB/s\tBASE P50 us\tBASE CSW/REQ\tRATIO\tVERIFIED")
	for _, row := range rows {
		base, baseGbps, baseP50, baseCSW, ratio := notApplicable, notApplicable, notApplicable, notApplicable, notApplicable
		if row.Baseline != "" {
			base, baseGbps, baseP50 = row.Baseline, fmt.Sprintf("%.3f", row.BaselineGbps), fmt.Sprintf("%.1f", row.BaselineP50us)
			if len(row.BaselineCtxSwitchesPerReq) > 0 {
				baseCSW = fmt.Sprintf("%.3g", ctxTotal(row.BaselineCtxSwitchesPerReq))
			}
			if row.BaselineGbps > 0 {
				ratio = fmt.Sprintf("%.3f", row.Ratio)
			}
		}
		csw := notApplicable
		if len(row.CtxSwitchesPerReq) > 0 {
			csw = fmt.Sprintf("%.3g", ctxTotal(row.CtxSwitchesPerReq))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.3f\t%.1f\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%v\n",
			row.Transport, row.Op, row.BlockSize, row.Batch, row.Threads, row.Gbps, row.P50us, row.P99us, row.P999us, csw,
			base, baseGbps, baseP50, baseCSW, ratio, row.Verified)
	}
	tw.Flush()
	if sweep {
		return
	}
	row := rows[0]
	if row.SubmitP50us > 0 || row.WaitP50us > 0 {
		fmt.Fprintf(w, "a batch's time (median): %.1f us in Submit, then %.1f us until Wait returned\n", row.SubmitP50us, row.WaitP50us)
	}
	if len(row.CtxSwitchesPerReq) > 0 {
		fmt.Fprintf(w, "context switches per request (CSW/REQ is their sum): %s\n", ctxSummary(row.CtxSwitchesPerReq))
		if len(row.BaselineCtxSwitchesPerReq) > 0 {
			fmt.Fprintf(w, "baseline's: %s\n", ctxSummary(row.BaselineCtxSwitchesPerReq))
		}
	}
	if len(row.Rails) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "RAIL\tNAME\tLABEL\tNUMA\tBYTES\tSHARE\tSLICES\tIN FLIGHT\tEWMA Gb/s\tERRORS\tPAUSED")
		for _, r := range row.Rails {
			ewma := notApplicable // one rail: nothing to choose, so nothing learnt
			if r.EWMAGbps > 0 {
				ewma = fmt.Sprintf("%.3f", r.EWMAGbps)
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%.3f\t%d\t%d\t%s\t%d\t%v\n",
				r.Index, r.Name, r.Label, r.NUMANode, r.Bytes, r.Share, r.Slices, r.InFlight, ewma, r.Errors, r.Paused)
		}
		tw.Flush()
	}
	if len(row.PluginCounters) > 0 {
		fmt.Fprintf(w, "plugin %s counters:", row.Transport)
		keys := make([]string, 0, len(row.PluginCounters))
		for k := range row.PluginCounters {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(w, " %s=%d", k, row.PluginCounters[k])
		}
		fmt.Fprintln(w)
	}
}

// benchRun is one bench configuration; run measures one row of it.
type benchRun struct {
	o                                        benchOpts
	opName, cfgPath, target, metaURL, policy string
	// targetCfg is the config file of the target engine bench starts
	// ("": the built-in one); see targetConfig.
	targetCfg  string
	noBaseline bool
	warmup     time.Duration
	lf         logFlags
	// prog is told each phase of a row (a nil one hears nothing).
	prog *benchProgress
}

// run measures b.o: Ferry and the baseline in alternating rounds, then
// verifies what arrived. A row that fails verification comes back with
// the verification's error.
func (b benchRun) run() (benchRow, error) {
	o, size := b.o, b.o.size
	total := size * int64(o.batch) * int64(o.threads)
	if total > 8<<30 {
		return benchRow{}, fmt.Errorf("size*batch*threads = %d bytes: more than 8 GiB of buffers; lower one of them", total)
	}
	ctx := context.Background()
	b.prog.phase("starting the engines")
	e, err := newEngine(ctx, b.cfgPath, fmt.Sprintf("bench-initiator-%d", os.Getpid()), b.metaURL, b.lf)
	if err != nil {
		return benchRow{}, err
	}
	defer e.Close()
	name := b.target
	var remote remoteMem
	procs := []procRef{{name: "engine"}}
	for _, p := range e.Status(ctx).Plugins {
		if p.PID > 0 {
			procs = append(procs, procRef{name: "plugin:" + p.Name, pid: p.PID})
		}
	}
	if name == "" {
		name = fmt.Sprintf("bench-target-%d", os.Getpid())
		meta := e.MetastoreURL() // the embedded or HTTP one; "": the config's (redis, etcd) or --metastore's
		if meta == "" {
			meta = b.metaURL
		}
		t, err := startTarget(append(targetArgs(b.targetCfg, name, meta, total), b.lf.args()...)...)
		if err != nil {
			return benchRow{}, err
		}
		defer t.stop()
		remote = targetMem{t: t, n: total}
		tp, err := targetPluginProcs(t)
		if err != nil {
			return benchRow{}, err
		}
		procs = append(append(procs, procRef{name: "target", pid: t.cmd.Process.Pid}), tp...)
	}
	seg, err := e.OpenSegment(ctx, name)
	if err != nil {
		return benchRow{}, err
	}
	var remoteBase uint64
	for _, b := range seg.Buffers {
		if b.Perm == host.RemoteReadWrite && b.Length >= uint64(total) {
			remoteBase = b.Base
			break
		}
	}
	if remoteBase == 0 {
		return benchRow{}, fmt.Errorf("segment %q has no read-write buffer of %d bytes", name, total)
	}
	local, err := e.Allocate(int(total))
	if err != nil {
		return benchRow{}, err
	}
	if _, err := e.Register(ctx, local, host.LocalOnly); err != nil {
		return benchRow{}, err
	}
	lay := ferryLayout{e: e, seg: seg.ID, remoteBase: remoteBase, o: o, policy: b.policy}
	if remote == nil {
		// Nobody answers for the far engine's memory: fill and read it
		// back through Ferry itself, with a scratch buffer of our own.
		scratch, err := e.Allocate(int(total))
		if err != nil {
			return benchRow{}, err
		}
		if _, err := e.Register(ctx, scratch, host.LocalOnly); err != nil {
			return benchRow{}, err
		}
		remote = ferryMem{lay: lay, scratch: scratch}
	}
	fy, err := newFerrySide(ctx, lay, local, remote)
	if err != nil {
		return benchRow{}, err
	}

	var base baseline
	if !b.noBaseline && b.target == "" {
		if base, err = startBaseline(o); err != nil {
			return benchRow{}, err
		}
		if base != nil {
			defer base.close()
		}
	}
	// Alternate Ferry and baseline in two rounds so that drift on a noisy
	// machine hits both alike. Before each round, off the clock, every
	// source holds that round's pattern and every destination another
	// one; after the last, the receiving side must hold the last round's.
	const rounds = 2
	var fr, br result
	fcsw := newCtxCounter(procs)
	var bcsw *ctxCounter
	if base != nil {
		bprocs := []procRef{{name: "bench"}}
		if p, ok := base.(*baselinePeer); ok && p.cmd != nil {
			bprocs = append(bprocs, procRef{name: "peer", pid: p.cmd.Process.Pid})
		}
		bcsw = newCtxCounter(bprocs)
	}
	for round := range rounds {
		b.prog.phase(fmt.Sprintf("Ferry, round %d of %d", round+1, rounds))
		if err := fy.fill(round); err != nil {
			return benchRow{}, err
		}
		if _, err := runLoop(o, b.warmup, fy.work); err != nil {
			return benchRow{}, err
		}
		fy.resetSplits()
		fcsw.begin()
		r, err := runLoop(o, o.duration/2, fy.work)
		fcsw.end()
		if err != nil {
			return benchRow{}, err
		}
		fy.addSplits(&r)
		fr.add(r)
		if base != nil {
			b.prog.phase(fmt.Sprintf("baseline %s, round %d of %d", base.name(), round+1, rounds))
			if err := base.fill(round); err != nil {
				return benchRow{}, err
			}
			if _, err := runLoop(o, b.warmup, base.work); err != nil {
				return benchRow{}, err
			}
			bcsw.begin()
			r, err := runLoop(o, o.duration/2, base.work)
			bcsw.end()
			if err != nil {
				return benchRow{}, err
			}
			br.add(r)
		}
	}
	// The statistics first: with --target, verify reads the far buffer
	// back through Ferry, and those reads are no part of the run.
	var pluginCounters map[string]uint64
	var rails []railRow
	st := e.Status(ctx)
	for _, p := range st.Plugins {
		if p.Name == o.transport {
			pluginCounters = p.Counters
		}
	}
	var railBytes uint64
	for _, r := range st.Rails {
		if r.Transport == o.transport {
			rails = append(rails, railRow{Index: r.Index, Name: r.Name, Label: r.Label, NUMANode: r.NUMANode,
				Bytes: r.Bytes, Slices: r.Slices, InFlight: r.InFlight, EWMAGbps: r.EWMAGbps, Errors: r.Errors, Paused: r.Paused})
			railBytes += r.Bytes
		}
	}
	for i := range rails {
		if railBytes > 0 {
			rails[i].Share = float64(rails[i].Bytes) / float64(railBytes)
		}
	}
	b.prog.phase("verifying what arrived")
	verifyErr := fy.verify(rounds - 1)
	if base != nil && verifyErr == nil {
		verifyErr = base.verify(rounds - 1)
	}
	row := benchRow{
		Transport: o.transport, Op: b.opName, BlockSize: size, Batch: o.batch, Threads: o.threads,
		Bytes: fr.bytes, Seconds: fr.seconds, Gbps: fr.gbps(),
		P50us: fr.pct(0.50), P99us: fr.pct(0.99), P999us: fr.pct(0.999),
		SubmitP50us: percentile(fr.submit, 0.50), WaitP50us: percentile(fr.wait, 0.50),
		CtxSwitchesPerReq: fcsw.perRequest(len(fr.lat) * o.batch),
	}
	if base != nil {
		row.Baseline = base.name()
		row.BaselineGbps, row.BaselineP50us = br.gbps(), br.pct(0.5)
		row.BaselineCtxSwitchesPerReq = bcsw.perRequest(len(br.lat) * o.batch)
		if row.BaselineGbps > 0 {
			row.Ratio = row.Gbps / row.BaselineGbps
		}
		if row.BaselineP50us > 0 {
			row.LatencyRatio = row.P50us / row.BaselineP50us
		}
	}
	row.Verified = verifyErr == nil
	row.PluginCounters, row.Rails = pluginCounters, rails
	return row, verifyErr
}
