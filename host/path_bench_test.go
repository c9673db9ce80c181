package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/observe"
	"golang.org/x/sys/unix"
)

// countingObserver counts transitions per stage: about the least a
// listening observer (a metrics counter) does.
type countingObserver struct {
	n [observe.Ended + 1]atomic.Uint64
}

func (c *countingObserver) Observe(ev observe.Event) { c.n[ev.Stage].Add(1) }

// BenchmarkRequestPath measures the engine's whole request path for 4 KiB
// writes in batches of 128 through the shm plugin, to the engine's own
// segment (no peer process): validate, admit, select, plan, submit, reap,
// wait. It runs without an observer and with a counting one, so that the
// cost of nobody listening, and of one listening, can be read off.
// -benchmem must show 0 allocs/op without an observer.
//
// The transport=shm|tcp/batch=1|128 variants run the same 4 KiB writes,
// without an observer, one request at a time and 128 at a time, over
// each transport: what the host spends per request where the issue
// "small and medium requests at least as fast as TENT" measures it.
// Every variant reports, per request (op), allocs/op, cpu-ns/op (the
// whole test process's user and system CPU, all threads, from
// getrusage(RUSAGE_SELF) over the timed loop: the host's side),
// csw/op (that process's voluntary and involuntary context switches)
// and plugin-cpu-ns/op (the plugin processes' CPU, from
// /proc/<pid>/task/*/schedstat; absent where the kernel has none). The
// plugin serves both ends of each transfer, as the engine writes to its
// own segment.
//
//	go test -run '^$' -bench 'RequestPath$/transport' -benchmem ./host
func BenchmarkRequestPath(b *testing.B) {
	for _, tr := range []string{"shm", "tcp"} {
		for _, batch := range []int{1, pathBenchBatch} {
			b.Run(fmt.Sprintf("transport=%s/batch=%d", tr, batch), func(b *testing.B) {
				pb := newPathBenchOf(b, tr, batch, nil)
				defer pb.close()
				measureRequestPath(b, pb)
			})
		}
	}
	// Without transfer.default_deadline the descriptors carry no
	// deadline: the plugins then read no clock per descriptor, which is
	// what this variant shows the cost of.
	b.Run("observer=none/deadline=none", func(b *testing.B) {
		benchRequestPath(b, func(c *config.Config) { c.Transfer.DefaultDeadline = 0 })
	})
	for _, withObs := range []bool{false, true} {
		name := "observer=none"
		if withObs {
			name = "observer=counting"
		}
		b.Run(name, func(b *testing.B) {
			var obs *countingObserver
			var opts []host.Option
			if withObs {
				obs = &countingObserver{}
				opts = append(opts, host.WithObserver(obs))
			}
			benchRequestPath(b, nil, opts...)
			if obs != nil && obs.n[observe.Ended].Load() < uint64(b.N) {
				b.Fatalf("observer saw %d ends of %d requests", obs.n[observe.Ended].Load(), b.N)
			}
		})
	}
}

func benchRequestPath(b *testing.B, tune func(*config.Config), opts ...host.Option) {
	pb := newPathBench(b, tune, opts...)
	defer pb.close()
	measureRequestPath(b, pb)
}

// measureRequestPath runs b.N requests of pb and reports them per request
// (see BenchmarkRequestPath).
func measureRequestPath(b *testing.B, pb *pathBench) {
	pids := pb.pluginPIDs()
	b.ReportAllocs()
	u0, p0, pok0 := selfUsage(), 0.0, false
	if len(pids) > 0 {
		p0, pok0 = schedCPU(pids)
	}
	b.ResetTimer()
	pb.requests(b.N)
	b.StopTimer()
	u1 := selfUsage()
	n := float64(b.N)
	b.ReportMetric(n/b.Elapsed().Seconds(), "req/s")
	b.ReportMetric(float64(u1.cpuNs-u0.cpuNs)/n, "cpu-ns/op")
	b.ReportMetric(float64(u1.csw-u0.csw)/n, "csw/op")
	if p1, ok := schedCPU(pids); pok0 && ok {
		b.ReportMetric((p1-p0)/n, "plugin-cpu-ns/op")
	}
}

// usage is what this process spent so far, all its threads (those that
// ended included): user and system CPU, and context switches.
type usage struct{ cpuNs, csw int64 }

func selfUsage() usage {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return usage{cpuNs: ru.Utime.Nano() + ru.Stime.Nano(), csw: ru.Nvcsw + ru.Nivcsw}
}

// schedCPU is the CPU time in ns that the processes pids ran so far, all
// their living threads: the first field of /proc/<pid>/task/*/schedstat.
// It says false where a process is gone or the kernel has no schedstat.
func schedCPU(pids []int) (float64, bool) {
	var sum float64
	for _, pid := range pids {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		if len(tasks) == 0 {
			return 0, false
		}
		for _, t := range tasks {
			raw, err := os.ReadFile(t)
			if err != nil {
				continue // the thread ended
			}
			f := strings.Fields(string(raw))
			if len(f) == 0 {
				return 0, false
			}
			ns, err := strconv.ParseFloat(f[0], 64)
			if err != nil {
				return 0, false
			}
			sum += ns
		}
	}
	return sum, true
}

// pathBench is an engine set up for BenchmarkRequestPath's workload:
// 4 KiB writes in batches of batch (128 unless newPathBenchOf says
// otherwise) through the transport's plugin (shm unless ...) to its own
// segment, warmed by one batch.
type pathBench struct {
	b     *testing.B
	e     *host.Engine
	reqs  []host.Request
	id    host.BatchID
	batch int
}

const pathBenchBatch = 128

func newPathBench(b *testing.B, tune func(*config.Config), opts ...host.Option) *pathBench {
	return newPathBenchOf(b, "shm", pathBenchBatch, tune, opts...)
}

func newPathBenchOf(b *testing.B, transport string, batch int, tune func(*config.Config), opts ...host.Option) *pathBench {
	const size = 4 << 10
	ctx := context.Background()
	cfg := config.Default(fmt.Sprintf("bench-%d-%d", b.N, benchEngines.Add(1)))
	cfg.PluginDir = binDir
	if tune != nil {
		tune(cfg)
	}
	e, err := host.New(ctx, cfg, opts...)
	if err != nil {
		b.Fatal(err)
	}
	pb := &pathBench{b: b, e: e, batch: batch}
	mem, err := e.Allocate(2 * batch * size)
	if err != nil {
		pb.close()
		b.Fatal(err)
	}
	src, dst := mem[:batch*size], mem[batch*size:]
	for i := range src {
		src[i] = byte(i * 7)
	}
	if _, err := e.Register(ctx, src, host.LocalOnly); err != nil {
		pb.close()
		b.Fatal(err)
	}
	base, err := e.Register(ctx, dst, host.RemoteReadWrite)
	if err != nil {
		pb.close()
		b.Fatal(err)
	}
	seg, err := e.OpenSegment(ctx, e.Name())
	if err != nil {
		pb.close()
		b.Fatal(err)
	}
	pb.reqs = make([]host.Request, batch)
	for k := range pb.reqs {
		pb.reqs[k] = host.Request{Op: host.Write, Local: src[k*size : (k+1)*size], Segment: seg.ID, Remote: base + uint64(k*size), Transport: transport}
	}
	if pb.id, err = e.AllocateBatch(batch); err != nil {
		pb.close()
		b.Fatal(err)
	}
	pb.run(batch) // warm: lanes, rails, pools
	return pb
}

// benchEngines numbers the benchmarks' engines, so that two alive at
// once have different names.
var benchEngines atomic.Int64

// requests runs n requests, in batches of at most pb.batch.
func (pb *pathBench) requests(n int) {
	for done := 0; done < n; done += pb.batch {
		pb.run(min(pb.batch, n-done))
	}
}

// pluginPIDs is the pids of the engine's running plugins.
func (pb *pathBench) pluginPIDs() []int {
	var pids []int
	for _, p := range pb.e.Status(context.Background()).Plugins {
		if p.PID > 0 {
			pids = append(pids, p.PID)
		}
	}
	return pids
}

// run submits n requests as one batch, waits for it and frees it.
func (pb *pathBench) run(n int) {
	b, e, ctx := pb.b, pb.e, context.Background()
	if err := e.Submit(pb.id, pb.reqs[:n]...); err != nil {
		b.Fatal(err)
	}
	if err := e.Wait(ctx, pb.id); err != nil {
		b.Fatal(err)
	}
	if bs, _ := e.BatchStatus(pb.id); bs.Completed != n {
		b.Fatalf("batch %+v, want %d completed", bs, n)
	}
	e.FreeBatch(pb.id)
	var err error
	if pb.id, err = e.AllocateBatch(pb.batch); err != nil {
		b.Fatal(err)
	}
}

func (pb *pathBench) close() {
	if pb.id != (host.BatchID{}) {
		pb.e.FreeBatch(pb.id)
	}
	pb.e.Close()
}

// BenchmarkBlockSubmit measures the prepared-block-list path: one
// SubmitBlocks call of n pairs (n = 1, 1k, 10k, 100k) of 256-byte blocks
// to the engine's own segment through a real plugin (shm or tcp), with
// merging (consecutive pairs: one task) and without (NoMerge: a task per
// pair). The timed sections cover SubmitBlocks only: ns/request is the
// submit cost per pair, allocs/request the allocations of the
// submissions per pair; the wait for the completions is outside them.
// Below 1,000 pairs a timed section makes 1000/n calls back to back (one
// batch), as an application submitting a few blocks at a time does: the
// per-call cost is in the figure. The sections are timed with the clock,
// and the allocations counted through runtime/metrics: b.StartTimer and
// b.StopTimer stop the world to read the memory statistics, and the
// world's restart woke the runtime's idle threads as a section began,
// which no application does between its calls. The rings are deep
// enough (transfer.ring_depth) for 100k descriptors, so that a
// submission measures the host's path, not the plugin's copying.
// cpu-ns/request is the submitting thread's own CPU time per pair
// (CLOCK_THREAD_CPUTIME_ID), and minflt, vcsw and ivcsw/call its page
// faults and voluntary and involuntary context switches per timed
// section (RUSAGE_THREAD): on a loaded machine they say what the wall
// time is made of. The submitting goroutine is locked to its thread
// (for those figures), and the engine is told so (WithLockedCallers), as
// the C ABI's is. With
// FERRY_BENCH_STOP_PLUGIN=1 the plugin is stopped over the timed
// sections (see benchBlocks). On two cores, 100k unmerged pairs take
// about as much submitter CPU per pair as 10k, but two to four times
// the wall time: for the whole of a call that long the submitter shares
// the cores with the plugin copying and the host reaping (involuntary
// switches per call rise tenfold), which a stopped plugin takes away.
func BenchmarkBlockSubmit(b *testing.B) {
	const bs, most = 256, 100_000
	for _, tr := range []string{"shm", "tcp"} {
		b.Run(tr, func(b *testing.B) {
			ctx := context.Background()
			cfg := config.Default(fmt.Sprintf("blockbench-%s-%d", tr, b.N))
			cfg.PluginDir = binDir
			cfg.Transfer.RingDepth = 1 << 17
			// benchBlocks locks its goroutine to its thread (for its
			// thread's figures): the engine is told so, as a C caller's is.
			e, err := host.New(ctx, cfg, host.WithLockedCallers())
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			mem, err := e.Allocate(2 * most * bs)
			if err != nil {
				b.Fatal(err)
			}
			fillRandom(mem) // written memory on both sides, no zero pages
			src, dst := mem[:most*bs], mem[most*bs:]
			if _, err := e.Register(ctx, src, host.LocalOnly); err != nil {
				b.Fatal(err)
			}
			base, err := e.Register(ctx, dst, host.RemoteReadWrite)
			if err != nil {
				b.Fatal(err)
			}
			seg, err := e.OpenSegment(ctx, e.Name())
			if err != nil {
				b.Fatal(err)
			}
			layout := host.BlockLayout{BlockSize: bs, Blocks: most}
			list, err := e.PrepareBlocks(seg.ID, src, layout, base, layout)
			if err != nil {
				b.Fatal(err)
			}
			pairs := make([]host.BlockPair, most)
			for k := range pairs {
				pairs[k] = host.BlockPair{Local: uint32(k), Remote: uint32(k)}
			}
			for _, merge := range []bool{true, false} {
				for _, n := range []int{1, 1000, 10_000, most} {
					b.Run(fmt.Sprintf("merge=%v/n=%d", merge, n), func(b *testing.B) {
						benchBlocks(b, e, list, host.BlockRequest{Op: host.Write, Transport: tr, NoMerge: !merge}, pairs[:n])
					})
				}
			}
		})
	}
}

func benchBlocks(b *testing.B, e *host.Engine, list *host.BlockList, br host.BlockRequest, pairs []host.BlockPair) {
	ctx := context.Background()
	reps := max(1, 1000/len(pairs)) // calls per timed section
	id, err := e.AllocateBatch(reps * len(pairs))
	if err != nil {
		b.Fatal(err)
	}
	var tasks host.BlockTasks
	var mallocs uint64
	// Allocations through runtime/metrics, sections timed by the clock
	// (spent): see the benchmark's comment.
	allocs := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/tiny/allocs:objects"}}
	readAllocs := func() uint64 {
		metrics.Read(allocs)
		return allocs[0].Value.Uint64() + allocs[1].Value.Uint64()
	}
	// The submitting thread's own CPU time (CLOCK_THREAD_CPUTIME_ID),
	// page faults and context switches (RUSAGE_THREAD): figures that
	// survive a loaded machine, and that tell the submitter's work from
	// its waiting.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var ru0, ru1 syscall.Rusage
	var cpu, minflt, vcsw, ivcsw int64
	// done is the wall time from each timed section's start until its
	// batch completed (Wait): the submission and the pipeline's work
	// behind it, of which ns/request times only the first. At large
	// sizes most of the copying and reaping happens after the submitting
	// call returned; this is the figure to compare a change that moves
	// work between the two by.
	var done time.Duration
	var spent time.Duration // the timed sections' wall time
	var start time.Time
	stopPID := 0
	submit := func() {
		count := 0
		for range reps {
			tasks, err = e.SubmitBlocks(id, list, br, pairs)
			if err != nil {
				b.Fatal(err)
			}
			count += tasks.Count
		}
		tasks.Count = count
	}
	run := func(timed bool) {
		if timed {
			before := readAllocs()
			if stopPID != 0 {
				_ = syscall.Kill(stopPID, syscall.SIGSTOP)
			}
			_ = syscall.Getrusage(rusageThread, &ru0)
			cpu0 := threadCPU()
			start = time.Now()
			submit()
			spent += time.Since(start)
			cpu += threadCPU() - cpu0
			_ = syscall.Getrusage(rusageThread, &ru1)
			if stopPID != 0 {
				_ = syscall.Kill(stopPID, syscall.SIGCONT)
			}
			minflt += ru1.Minflt - ru0.Minflt
			vcsw += ru1.Nvcsw - ru0.Nvcsw
			ivcsw += ru1.Nivcsw - ru0.Nivcsw
			mallocs += readAllocs() - before
		} else {
			submit()
		}
		if err := e.Wait(ctx, id); err != nil {
			b.Fatal(err)
		}
		if timed {
			done += time.Since(start)
		}
		if bs, _ := e.BatchStatus(id); bs.Completed != tasks.Count {
			b.Fatalf("batch %+v, want %d completed", bs, tasks.Count)
		}
		e.FreeBatch(id)
		if id, err = e.AllocateBatch(reps * len(pairs)); err != nil {
			b.Fatal(err)
		}
	}
	run(false) // warm: lanes, rails, pools
	// FERRY_BENCH_STOP_PLUGIN=1 stops the plugin's process (SIGSTOP)
	// over each timed section and resumes it after: the submitter then
	// has the machine to itself (no copying, no completions to reap),
	// which tells the host path's own cost from its competition with
	// them for the cores.
	if os.Getenv("FERRY_BENCH_STOP_PLUGIN") != "" {
		for _, p := range e.Status(ctx).Plugins {
			if p.Name == br.Transport {
				stopPID = p.PID
			}
		}
	}
	b.ResetTimer()
	for range b.N {
		run(true)
	}
	b.StopTimer()
	e.FreeBatch(id)
	reqs := float64(b.N) * float64(reps*len(pairs))
	b.ReportMetric(float64(spent.Nanoseconds())/reqs, "ns/request")
	b.ReportMetric(reqs/spent.Seconds(), "req/s")
	b.ReportMetric(float64(done.Nanoseconds())/reqs, "done-ns/request")
	b.ReportMetric(float64(mallocs)/reqs, "allocs/request")
	b.ReportMetric(float64(cpu)/reqs, "cpu-ns/request")
	b.ReportMetric(float64(minflt)/float64(b.N), "minflt/call")
	b.ReportMetric(float64(vcsw)/float64(b.N), "vcsw/call")
	b.ReportMetric(float64(ivcsw)/float64(b.N), "ivcsw/call")
	b.ReportMetric(float64(tasks.Count/reps), "tasks")
}

// rusageThread is Linux's RUSAGE_THREAD: the calling thread's usage.
const rusageThread = 1

// threadCPU is the calling thread's CPU time in ns
// (CLOCK_THREAD_CPUTIME_ID). getrusage's times are not fit for a section
// of a millisecond: the kernel brings a running thread's runtime up to
// date only at a tick or a switch, so they lag by up to a tick.
func threadCPU() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}
