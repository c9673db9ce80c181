package path

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/device"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/host/staging"
	"github.com/ferrydev/ferry/sdk"
)

// Staged requests (host/staging): a request on device memory that no
// transport reaches directly is routed to a transport for host memory,
// and the staged stage takes it from there. It runs the request as one
// pipeline of hops, on a goroutine the executor owns:
//
//	write, device here:   device → slot (this engine's device plugin)
//	write, device there:  reserve a slot there, network into it, land it there
//	read, device there:   fetch into a slot there, network out of it
//	read, device here:    network into a slot, slot → device
//
// and ends the task once: COMPLETED, FAILED with the hop that failed,
// or the CANCELED or TIMEOUT decided meanwhile, only once no hop still
// touches its memory. The network hop is a request of its own through
// this same path (its rails, retries, failover and credit).

// stagingState is the executor's staging: its slots and device memory.
type stagingState struct {
	devs  *device.Set
	depth int

	mu     sync.Mutex
	pool   *staging.Pool // nil until Enable
	base   uint64        // the pool's address, as peers address it
	region uint32        // the pool's host region (host/localmem)
	server *staging.Server
	jobs   map[stagedKey]context.CancelCauseFunc
}

type stagedKey struct {
	batch uint64
	i     int
}

// EnableStaging gives the executor the pool it stages through: pool's
// memory is registered as host region region at base, with every
// transport (peers read and write its slots) and with the device
// plugins. The engine calls it once, when device memory is first
// registered.
func (e *Executor) EnableStaging(pool *staging.Pool, base uint64, region uint32) {
	s := &e.stg
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pool, s.base, s.region = pool, base, region
	s.server = staging.NewServer(pool, base, stagingCopier{e}, time.Minute)
}

// StagingPool returns the pool, nil before EnableStaging.
func (e *Executor) StagingPool() (*staging.Pool, uint32) {
	s := &e.stg
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool, s.region
}

func (s *stagingState) current() (*staging.Pool, uint64, uint32, *staging.Server) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pool, s.base, s.region, s.server
}

// isDevice reports whether k is device memory staging can serve.
func isDevice(k sdk.MemoryKind) bool { return k == sdk.MemoryCUDA || k == sdk.MemoryROCm }

// remoteKind returns the kind of the target buffer of r at rem.
func remoteKind(r *Request, rem *remote) sdk.MemoryKind {
	if rem == nil || rem.Desc == nil {
		return sdk.MemoryCPU
	}
	if i := segment.Find(rem.Desc.Buffers, r.Remote); i >= 0 {
		return rem.Desc.Buffers[i].Location.OrCPU()
	}
	return sdk.MemoryCPU
}

// stagingWhy says why r cannot be staged, "" when it can: staging
// serves device memory at either end, through host memory.
func (e *Executor) stagingWhy(r *Request, rem *remote) string {
	_, _, local := e.devs().Lookup(uint64(addr(r.Local)), uint64(len(r.Local)))
	rk := remoteKind(r, rem)
	switch {
	case !local && !isDevice(rk):
		return "neither end is device memory"
	case rk == sdk.MemoryFile:
		return "the target is a file segment, which staging does not serve"
	}
	if local {
		if pool, _, _, _ := e.stg.current(); pool == nil {
			return "this engine has no staging pool"
		}
	}
	return ""
}

func (e *Executor) devs() *device.Set { return e.stg.devs }

// stagedStage hands t, routed to staging, to a goroutine that runs its
// hops and ends it.
func (e *Executor) stagedStage(t *task) {
	b, i := t.b, t.i
	// One "slice": the staged run. A cancel or a deadline decided while
	// it runs waits for it (Batch.Finish holds the task), so the task
	// ends only once no hop touches its memory.
	b.SetSlices(i, 1)
	e.note(b, i, observe.Sliced, t.rt.ps.idx, 1, nil)
	ctx, cancel := context.WithCancelCause(context.Background())
	if d := b.Task(i).Deadline; d != 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithDeadline(ctx, time.Unix(0, d))
		prev := cancel
		cancel = func(err error) { prev(err); stop() }
	}
	key := stagedKey{b.ID(), i}
	s := &e.stg
	s.mu.Lock()
	if s.jobs == nil {
		s.jobs = make(map[stagedKey]context.CancelCauseFunc)
	}
	s.jobs[key] = cancel
	s.mu.Unlock()
	j := stagedJob{b: b, i: i, req: t.rec.req, rem: t.rem, net: t.rt.ps}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.jobs, key)
			s.mu.Unlock()
			cancel(nil)
		}()
		go func() { // the engine closing ends the job; this exits with it
			select {
			case <-e.quit:
				cancel(ErrClosed)
			case <-ctx.Done():
			}
		}()
		e.runStaged(ctx, &j)
	}()
}

// cancelStaged tells the staged run of task i of b, if any, that its end
// was decided (the tracker's Held hook): it stops starting slices.
func (e *Executor) cancelStaged(b *progress.Batch, i int) bool {
	s := &e.stg
	s.mu.Lock()
	c, ok := s.jobs[stagedKey{b.ID(), i}]
	s.mu.Unlock()
	if ok {
		st, _ := b.Ending(i)
		c(fmt.Errorf("the task was %s", st))
	}
	return ok
}

// stagedJob is one staged task.
type stagedJob struct {
	b   *progress.Batch
	i   int
	req Request
	rem *remote
	net *Plugin // the transport of the network hop
}

// stagedAttempts bounds how many times a staged request is run again
// after a device plugin died under it (it is started again on next use).
const stagedAttempts = 2

// runStaged runs j's hops and ends its task.
func (e *Executor) runStaged(ctx context.Context, j *stagedJob) {
	var err error
	for attempt := 1; attempt <= stagedAttempts; attempt++ {
		var hops []staging.Hop
		var plan staging.Plan
		hops, plan, err = e.stagedHops(j, false)
		if err == nil {
			start := time.Now()
			var busy staging.HopTimes
			busy, err = staging.Run(ctx, plan, hops)
			if e.log.IsDebug() {
				args := []any{"segment", j.rem.Name, "bytes", plan.Length, "slices", (plan.Length + plan.SliceSize - 1) / plan.SliceSize, "took", time.Since(start), "error", err}
				for k, h := range hops {
					args = append(args, h.Name, busy[k])
				}
				e.log.Debug("staged request: how long each hop was busy", args...)
			}
		}
		if err == nil || ctx.Err() != nil || !errors.Is(err, device.ErrUnavailable) && !errors.Is(err, errDeviceDied) {
			break
		}
		e.log.Warn("staged request: a device plugin died under it; running it again", "segment", j.rem.Name, "attempt", attempt, "error", err)
	}
	b, i := j.b, j.i
	// The task holds one "slice" (stagedStage), so a cancel or deadline
	// decided while the hops ran only held it: Release ends it in that
	// state. After the call that ends it, b is not touched again: its
	// waiter may free the batch at once.
	switch {
	case err == nil:
		b.Task(i).AddBytes(uint64(len(j.req.Local))) // counted once: a run again after a plugin died rewrote them
		if !b.Finish(i, progress.Completed, nil) {
			b.Release(i)
		}
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, staging.ErrPoolExhausted) && ctx.Err() != nil:
		b.Finish(i, progress.Timeout, fmt.Errorf("%w: staged %s of %d bytes at segment %q: %w", ErrDeadlineExceeded, j.req.Op, len(j.req.Local), j.rem.Name, err))
		b.Release(i)
	case errors.Is(err, ErrClosed):
		b.Finish(i, progress.Canceled, err)
		b.Release(i)
	default:
		if !b.Finish(i, progress.Failed, fmt.Errorf("%w: staged %s of %d bytes at segment %q: %w", ErrPluginFailed, j.req.Op, len(j.req.Local), j.rem.Name, err)) {
			b.Release(i)
		}
	}
}

// errDeviceDied marks a hop whose device plugin died under it.
var errDeviceDied = errors.New("device plugin died")

// stagedHopNames names j's hops, in order, for an explanation.
func (e *Executor) stagedHopNames(j *stagedJob) []string {
	hops, _, err := e.stagedHops(j, true)
	if err != nil {
		return []string{err.Error()}
	}
	names := make([]string, len(hops))
	for i, h := range hops {
		names[i] = h.Name
	}
	return names
}

// stagedHops builds j's hops and plan; dry builds them only to name
// them (Explain), without a task or a control client.
func (e *Executor) stagedHops(j *stagedJob, dry bool) ([]staging.Hop, staging.Plan, error) {
	r := &j.req
	n := uint64(len(r.Local))
	laddr := uint64(addr(r.Local))
	lreg, loff, localDev := e.devs().Lookup(laddr, n)
	if localDev && lreg.Lost != "" {
		return nil, staging.Plan{}, fmt.Errorf("%w: local %s: %s", ErrNotRegistered, lreg.Name(), lreg.Lost)
	}
	rk := remoteKind(r, j.rem)
	remoteDev := isDevice(rk)
	pool, _, poolRegion, _ := e.stg.current()
	plan := staging.Plan{Length: n, SliceSize: uint64(e.cfg.Staging.SliceSize), Depth: e.cfg.Staging.Depth}
	if plan.SliceSize == 0 {
		plan.SliceSize = 4 << 20
	}
	if localDev && pool != nil {
		plan.Pool = pool
		plan.SliceSize = min(plan.SliceSize, pool.SlotSize())
	} else if localDev && !dry {
		return nil, plan, errors.New("this engine has no staging pool")
	}
	if remoteDev && j.rem.Desc != nil && j.rem.Desc.StagingSlot > 0 {
		plan.SliceSize = min(plan.SliceSize, j.rem.Desc.StagingSlot) // a slice fits the target's slot
	}
	deadline := time.Time{}
	if j.b != nil {
		if d := j.b.Task(j.i).Deadline; d != 0 {
			deadline = time.Unix(0, d)
		}
	}
	var cl *control.Client
	if remoteDev && !dry {
		if j.rem.Desc == nil || j.rem.Desc.Control == "" || e.hc == nil {
			return nil, plan, fmt.Errorf("segment %q publishes no control service to stage through", j.rem.Name)
		}
		var err error
		if cl, err = e.hc.Client(j.rem.Desc.Control); err != nil {
			return nil, plan, err
		}
	}
	ask := func(op control.StageOp, slot, at, length uint64) control.StageAsk {
		a := control.StageAsk{From: e.name, FromIncarnation: e.incarnation, To: j.rem.Name, ToIncarnation: j.rem.Desc.Incarnation,
			Op: op, Slot: slot, Addr: at, Length: length}
		if !deadline.IsZero() {
			a.Deadline = deadline.UnixNano()
		}
		return a
	}
	there := fmt.Sprintf("segment %q", j.rem.Name)
	release := func(s *staging.Slice) {
		s.Defer(func() {
			ctx, cancel := context.WithTimeout(context.Background(), ControlTimeout)
			defer cancel()
			if _, err := cl.Stage(ctx, ask(control.StageRelease, s.Remote, 0, s.Len)); err != nil {
				e.log.Warn("staged request: releasing a slot at the target failed; its lease will end it", "segment", j.rem.Name, "slot", s.Remote, "error", err)
			}
		})
	}
	stageErr := func(err error) error {
		if status.Code(errors.Unwrap(err)) == codes.Unimplemented || status.Code(err) == codes.Unimplemented {
			return fmt.Errorf("%w: the target engine cannot stage into its device memory (an older engine)", err)
		}
		return err
	}
	devHop := func(toDevice bool) staging.Hop {
		name := fmt.Sprintf("device to host (%s)", lreg.Name())
		if toDevice {
			name = fmt.Sprintf("host to device (%s)", lreg.Name())
		}
		return staging.Hop{Name: name, Workers: 2, Do: func(ctx context.Context, s *staging.Slice) error {
			dev := sdk.MemRef{Region: lreg.ID, Offset: loff + s.Off}
			host := sdk.MemRef{Region: poolRegion, Offset: s.Local.Off}
			src, dst := dev, host
			if toDevice {
				src, dst = host, dev
			}
			err := e.devs().Copy(ctx, lreg.Plugin, src, dst, s.Len, name)
			if err != nil && e.devs().Died(lreg.Plugin) {
				err = fmt.Errorf("%w: %w", errDeviceDied, err)
			}
			return err
		}}
	}
	netHop := staging.Hop{Name: fmt.Sprintf("network %s (%s) to %s", r.Op, j.net.name, there), Workers: 2, Do: func(ctx context.Context, s *staging.Slice) error {
		local := r.Local[s.Off : s.Off+s.Len]
		if s.HasLocal {
			local = s.Local.Mem[:s.Len]
		}
		remote := r.Remote + s.Off
		if remoteDev {
			remote = s.Remote
		}
		// The inner request is not abandoned on a cancel: it ends by its
		// deadline (the task's), and its slot is not reused before.
		return e.Transfer(context.WithoutCancel(ctx), Request{Op: r.Op, Local: local, Segment: r.Segment, Remote: remote,
			Priority: r.Priority, Deadline: deadline, Transport: j.net.name, Tenant: r.Tenant, Intent: r.Intent})
	}}
	// takeSlot is a hop that takes a slot at the target (reserve, or
	// fetch device memory at its address into one), given back once the
	// slice leaves the pipeline.
	takeSlot := func(name string, workers int, op control.StageOp, at func(*staging.Slice) uint64) staging.Hop {
		return staging.Hop{Name: name, Workers: workers, Do: func(ctx context.Context, s *staging.Slice) error {
			slot, err := cl.Stage(ctx, ask(op, 0, at(s), s.Len))
			if err != nil {
				return stageErr(err)
			}
			s.Remote = slot
			release(s)
			return nil
		}}
	}
	var hops []staging.Hop
	switch r.Op {
	case Write:
		if localDev {
			hops = append(hops, devHop(false))
		}
		if remoteDev {
			hops = append(hops, takeSlot("reserve a slot at "+there, 1, control.StageReserve, func(*staging.Slice) uint64 { return 0 }))
		}
		hops = append(hops, netHop)
		if remoteDev {
			hops = append(hops, staging.Hop{Name: "host to device at " + there, Workers: 2, Do: func(ctx context.Context, s *staging.Slice) error {
				_, err := cl.Stage(context.WithoutCancel(ctx), ask(control.StageLand, s.Remote, r.Remote+s.Off, s.Len))
				return stageErr(err)
			}})
		}
	case Read:
		if remoteDev {
			hops = append(hops, takeSlot("device to host at "+there, 2, control.StageFetch, func(s *staging.Slice) uint64 { return r.Remote + s.Off }))
		}
		hops = append(hops, netHop)
		if localDev {
			hops = append(hops, devHop(true))
		}
	default:
		return nil, plan, fmt.Errorf("%w: op %s cannot be staged", ErrInvalid, r.Op)
	}
	return hops, plan, nil
}

// stagingCopier lands peers' slots into this engine's device memory and
// fills them from it (staging.Copier), checking the permission the
// device memory was registered with.
type stagingCopier struct{ e *Executor }

func (c stagingCopier) region(at, n uint64, write bool, what string) (device.Region, uint64, error) {
	r, off, ok := c.e.devs().Lookup(at, n)
	if !ok {
		return r, 0, fmt.Errorf("%w: %#x+%d", control.ErrStageNoDevice, at, n)
	}
	if r.Lost != "" {
		return r, 0, fmt.Errorf("%w: %s at %#x: %s", control.ErrStageNoDevice, r.Name(), at, r.Lost)
	}
	if write && !r.Perm.AllowsRemoteWrite() || !write && !r.Perm.AllowsRemoteRead() {
		return r, 0, fmt.Errorf("%w: %s at %#x+%d: %s does not allow it (registered %s)", control.ErrStageNoDevice, what, at, n, r.Name(), r.Perm)
	}
	return r, off, nil
}

func (c stagingCopier) ToDevice(ctx context.Context, slot staging.Slot, at, n uint64) error {
	r, off, err := c.region(at, n, true, "a peer's write")
	if err != nil {
		return err
	}
	_, _, region, _ := c.e.stg.current()
	return c.e.devs().Copy(ctx, r.Plugin, sdk.MemRef{Region: region, Offset: slot.Off}, sdk.MemRef{Region: r.ID, Offset: off}, n,
		"host to device ("+r.Name()+") for a peer")
}

func (c stagingCopier) FromDevice(ctx context.Context, at uint64, slot staging.Slot, n uint64) error {
	r, off, err := c.region(at, n, false, "a peer's read")
	if err != nil {
		return err
	}
	_, _, region, _ := c.e.stg.current()
	return c.e.devs().Copy(ctx, r.Plugin, sdk.MemRef{Region: r.ID, Offset: off}, sdk.MemRef{Region: region, Offset: slot.Off}, n,
		"device to host ("+r.Name()+") for a peer")
}

// StageServer answers peers' Stage calls (control.Stager).
type StageServer struct{ e *Executor }

// StageServer returns the executor's control.Stager.
func (e *Executor) StageServer() StageServer { return StageServer{e} }

// Stage serves one Stage call.
func (s StageServer) Stage(ctx context.Context, a control.StageAsk) (uint64, error) {
	_, _, _, srv := s.e.stg.current()
	if srv == nil {
		return 0, fmt.Errorf("%w: engine %q has no device memory registered, so nothing to stage into", control.ErrStageNoDevice, s.e.name)
	}
	switch a.Op {
	case control.StageReserve:
		return srv.Reserve(ctx, a.From, a.Length)
	case control.StageLand:
		return 0, srv.Land(ctx, a.From, a.Slot, a.Addr, a.Length)
	case control.StageFetch:
		return srv.Fetch(ctx, a.From, a.Addr, a.Length)
	case control.StageRelease:
		return 0, srv.Release(a.From, a.Slot)
	}
	return 0, fmt.Errorf("unknown stage op %d", a.Op)
}
