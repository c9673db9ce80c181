package path

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/host/selector"
	"github.com/ferrydev/ferry/host/validate"
	"github.com/ferrydev/ferry/internal/intent"
	"github.com/ferrydev/ferry/sdk"
)

// Intent says what a request is for; policies match on it.
type Intent = intent.Intent

// Routing: the validate and select stages of the request path, as the
// engine connects them. host/validate judges a request against the
// local registry's answer and the segment's descriptor; host/selector
// orders the transports. Errors here make a task INVALID: nothing was
// sent.

// newSelector compiles the configured policies against the engine's
// plugins, in the order the engine holds them.
func newSelector(cfg *config.Config, plugins []*Plugin) (*selector.Selector, error) {
	names := make([]string, len(plugins))
	for i, ps := range plugins {
		names[i] = ps.name
	}
	pols := make([]selector.Policy, 0, len(cfg.Policies))
	for _, p := range cfg.Policies {
		m := p.Match
		pols = append(pols, selector.Policy{
			Name: p.Name, Transports: p.Transports, Rails: p.Rails,
			Match: selector.Match{
				Segment: m.Segment, SameMachine: m.SameMachine, LocalKind: sdk.MemoryKind(m.LocalMemory), RemoteKind: sdk.MemoryKind(m.RemoteMemory),
				MinSize: uint64(m.MinSize), MaxSize: uint64(m.MaxSize), Priorities: m.Priorities, Intents: m.Intents,
			},
		})
	}
	s, err := selector.New(pols, names)
	if err != nil {
		return nil, fmt.Errorf("%w: policies: %w", ErrInvalid, err)
	}
	return s, nil
}

// maxInlineCandidates is how many plugins choose describes to the selector
// without allocating.
const maxInlineCandidates = 8

// selectorFacts fills what the selector needs to know of r against rem:
// the request's facts and, in cands, every plugin's state for this
// segment.
func (e *Executor) selectorFacts(r *Request, rem *remote, n uint64, cands []selector.Transport) selector.Request {
	for i, ps := range e.plugins {
		t := selector.Transport{Name: ps.name, Opened: rem.Opened[i], Running: ps.usable()}
		if p := ps.proc(); p != nil {
			t.SameMachineOnly, t.MemoryKinds = p.Info.SameMachineOnly, p.Info.MemoryKinds
			t.ForeignMemory, t.ForeignLocalOnly = p.Info.ForeignMemory, p.Info.ForeignLocalOnly
		}
		cands[i] = t
	}
	sr := selector.Request{
		Op: r.Op.String(), Size: n, Priority: r.Priority, Intent: string(r.Intent), Policy: r.Policy,
		Hint: r.Transport, LocalKind: sdk.MemoryCPU, Segment: selector.Memory, SameMachine: rem.Desc.MachineID == e.machineID,
	}
	if i := segment.Find(rem.Desc.Buffers, r.Remote); i >= 0 {
		sr.RemoteKind = rem.Desc.Buffers[i].Location
		sr.RemoteForeign = rem.Desc.Buffers[i].Foreign
	}
	if len(r.Local) > 0 {
		lp, ln := uint64(addr(r.Local)), uint64(len(r.Local))
		if reg, _, ok := e.stg.devs.Lookup(lp, ln); ok {
			sr.LocalKind = reg.Kind
		} else {
			sr.LocalForeign = e.mem.Foreign(lp, ln)
		}
	}
	return sr
}

// chooseOrStage picks the plugin for r's first attempt as choose does;
// when none reaches its memory and one end is device memory, it picks
// the transport that carries the staged request's network hop between
// host slots (staged true).
func (e *Executor) chooseOrStage(r *Request, rem *remote, n uint64) (ps *Plugin, policy int, staged bool, err error) {
	ps, policy, err = e.choose(r, rem, n)
	// A hinted transport that cannot reach device memory may still
	// carry the staged request between host slots: the hint then names
	// the network hop's transport.
	if err == nil || e.stg.devs == nil || !errors.Is(err, selector.ErrNoTransport) && !errors.Is(err, selector.ErrUnreachable) {
		return ps, policy, false, err
	}
	if why := e.stagingWhy(r, rem); why != "" {
		return nil, -1, false, err
	}
	ps, policy, serr := e.chooseHost(r, rem, n)
	if serr != nil {
		// INVALID only: no wait for a pinned transport to come back, as
		// a transport the memory cannot use would not serve it then.
		if serr.Error() == err.Error() {
			return nil, -1, false, fmt.Errorf("%w: %v; nor can it be staged through host memory over it", ErrInvalid, err)
		}
		return nil, -1, false, fmt.Errorf("%w: %v; and no transport carries it staged through host memory: %v", ErrInvalid, err, serr)
	}
	return ps, policy, true, nil
}

// chooseHost picks the transport for the network hop of a staged r:
// host memory at both ends.
func (e *Executor) chooseHost(r *Request, rem *remote, n uint64) (*Plugin, int, error) {
	cands := make([]selector.Transport, len(e.plugins))
	sr := e.selectorFacts(r, rem, n, cands)
	sr.LocalKind, sr.RemoteKind, sr.LocalForeign, sr.RemoteForeign = sdk.MemoryCPU, sdk.MemoryCPU, false, false
	i, pol, err := e.sel.Route(&sr, cands)
	if err != nil {
		return nil, -1, e.selectErr(r, rem, err)
	}
	return e.plugins[i], pol, nil
}

// choose picks the plugin for r's first attempt: the selector's decision
// over the configured policies, the hint and the plugins' states. Its
// errors make the task INVALID.
func (e *Executor) choose(r *Request, rem *remote, n uint64) (*Plugin, int, error) {
	var buf [maxInlineCandidates]selector.Transport
	cands := buf[:0]
	if len(e.plugins) <= len(buf) {
		cands = buf[:len(e.plugins)]
	} else {
		cands = make([]selector.Transport, len(e.plugins))
	}
	sr := e.selectorFacts(r, rem, n, cands)
	i, pol, err := e.sel.Route(&sr, cands)
	if err != nil {
		return nil, -1, e.selectErr(r, rem, err)
	}
	return e.plugins[i], pol, nil
}

// selectErr puts a selector error into the engine's taxonomy, naming the
// segment.
func (e *Executor) selectErr(r *Request, rem *remote, err error) error {
	switch {
	case errors.Is(err, selector.ErrUnknownTransport):
		return fmt.Errorf("%w: transport hint %q: no such plugin configured: %w", ErrTransportUnavailable, r.Transport, err)
	case errors.Is(err, selector.ErrUnreachable):
		return fmt.Errorf("%w: transport hint %q cannot reach segment %q: %w", ErrTransportUnavailable, r.Transport, rem.Name, err)
	case errors.Is(err, selector.ErrNoTransport):
		return fmt.Errorf("%w: segment %q: %w", ErrTransportUnavailable, rem.Name, err)
	}
	return fmt.Errorf("%w: %w", ErrInvalid, err)
}

// Explain is host.Engine.Explain, which documents it.
func (e *Executor) Explain(req Request) (string, error) {
	if e.closed.Load() {
		return "", ErrClosed
	}
	n := uint64(len(req.Local))
	rem := e.remote(req.Segment)
	if err := checkRequest(&req, rem); err != nil {
		return "", err
	}
	cands := make([]selector.Transport, len(e.plugins))
	sr := e.selectorFacts(&req, rem, n, cands)
	p, err := e.sel.Select(&sr, cands)
	text := fmt.Sprintf("segment %q on machine %q (this engine: %q)\n", rem.Name, rem.Desc.MachineID, e.machineID)
	if reg, _, ok := e.stg.devs.Lookup(uint64(addr(req.Local)), n); ok {
		text += fmt.Sprintf("local memory: %s\n", reg.Name())
	}
	text += p.Explain()
	if err == nil {
		return text, nil
	}
	_, _, staged, serr := e.chooseOrStage(&req, rem, n)
	if serr != nil || !staged {
		if serr == nil {
			serr = err
		}
		return text, e.selectErr(&req, rem, serr)
	}
	return text + e.explainStaged(&req, rem, n), nil
}

// explainStaged says how a request that no transport reaches directly
// is staged: its hops, and the transport of the network hop.
func (e *Executor) explainStaged(r *Request, rem *remote, n uint64) string {
	ps, _, err := e.chooseHost(r, rem, n)
	if err != nil {
		return "staged through host memory: no transport carries host memory to the segment: " + err.Error() + "\n"
	}
	j := stagedJob{req: *r, rem: rem, net: ps}
	var b strings.Builder
	fmt.Fprintf(&b, "staged through host memory (no transport reaches this memory directly), pipelined in slices of %s, %d in flight:\n",
		selector.FormatSize(uint64(e.cfg.Staging.SliceSize)), e.cfg.Staging.Depth)
	for i, h := range e.stagedHopNames(&j) {
		fmt.Fprintf(&b, "  %d. %s\n", i+1, h)
	}
	return b.String()
}

// checkRequest checks what a request must be before anything else is
// looked at: a known op, a length, an open segment.
func checkRequest(r *Request, rem *remote) error {
	f := validate.Basic(validate.Op(r.Op), uint64(len(r.Local)), rem != nil)
	return faultErr(f, r, rem, validate.Result{})
}

// routeMemo is the route the selector chose for the previous request of
// one Submit call, and the facts it chose it on: a request with the same
// facts (segment, op, size, priority, intent, policy, hint, local and
// remote region) takes it without asking again. Facts outside the request
// (a plugin dying, a descriptor changing) may change within the call;
// the memo does not look, as a route chosen a moment earlier would not
// either: put fails on a dead plugin's lane, and failover takes the task.
// The selector's facts (selectorFacts) were a seventh of the host's work
// per request in a batch of 128 4 KiB writes (BenchmarkRequestPath).
type routeMemo struct {
	ok         bool
	rem        *remote
	op         Op
	prio       Priority
	n          uint64
	intent     Intent
	policy     string
	hint       string
	lreg, rreg uint32
	ps         *Plugin
	pol        int
	staged     bool
}

// take sets rt's route to the remembered one when request r to rem,
// whose regions rt holds, has the same facts, and reports whether it did.
func (m *routeMemo) take(r *Request, rem *remote, rt *routed) bool {
	if !m.ok || m.rem != rem || m.op != r.Op || m.prio != r.Priority || m.n != uint64(len(r.Local)) ||
		m.lreg != rt.lreg || m.rreg != rt.rreg || m.intent != r.Intent || m.policy != r.Policy || m.hint != r.Transport {
		return false
	}
	rt.ps, rt.policy, rt.staged = m.ps, m.pol, m.staged
	return true
}

// keep remembers request r's route rt to rem and the facts it was
// chosen on.
func (m *routeMemo) keep(r *Request, rem *remote, rt *routed) {
	*m = routeMemo{ok: true, rem: rem, op: r.Op, prio: r.Priority, n: uint64(len(r.Local)), intent: r.Intent, policy: r.Policy, hint: r.Transport,
		lreg: rt.lreg, rreg: rt.rreg, ps: rt.ps, pol: rt.policy, staged: rt.staged}
}

// routed is where the route stage sends a request: the plugin, the policy that
// applies (-1: none) and both ranges as (region, offset).
type routed struct {
	ps         *Plugin
	policy     int
	staged     bool // ps carries the network hop of a staged request (staged.go)
	lreg, rreg uint32
	loff, roff uint64
}

// validate runs the validation stage on r against rem and returns both
// ranges translated. Its errors make the task INVALID: nothing was sent.
func (e *Executor) validate(r *Request, rem *remote) (rt routed, err error) {
	n := uint64(len(r.Local))
	lp := uint64(addr(r.Local))
	in := validate.Input{Op: validate.Op(r.Op), Length: n, Open: rem != nil, Remote: r.Remote}
	if rem != nil {
		in.Retired, in.Buffers = rem.Retired, rem.Desc.Buffers
	}
	if in.Open && in.Retired == "" && n != 0 {
		in.LocalRegion, in.LocalOffset, in.LocalFound = e.lookupLocal(lp, n)
	}
	v := validate.Check(&in)
	if v.Fault != validate.OK {
		return rt, faultErr(v.Fault, r, rem, v)
	}
	rt.lreg, rt.loff, rt.rreg, rt.roff = v.LocalRegion, v.LocalOffset, v.RemoteRegion, v.RemoteOffset
	return rt, nil
}

// faultErr puts validation fault f of request r against rem into the
// error taxonomy, naming the segment (v is the verdict, for the buffer it
// names); nil for validate.OK.
func faultErr(f validate.Fault, r *Request, rem *remote, v validate.Result) error {
	n := uint64(len(r.Local))
	switch f {
	case validate.OK:
		return nil
	case validate.UnknownOp:
		return fmt.Errorf("%w: unknown op %d", ErrInvalid, r.Op)
	case validate.ZeroLength:
		return fmt.Errorf("%w: zero length", ErrInvalid)
	case validate.NotOpen:
		return fmt.Errorf("%w: segment handle %d is not open", ErrSegmentNotFound, r.Segment)
	case validate.Retired:
		return fmt.Errorf("%w: %s", ErrSegmentNotFound, rem.Retired)
	case validate.NotRegistered:
		lp := uint64(addr(r.Local))
		return fmt.Errorf("%w: local range %#x+%d is not inside one registered buffer; register it with Engine.Register", ErrNotRegistered, lp, n)
	case validate.NoBuffer:
		return fmt.Errorf("%w: segment %q has no registered buffer at %#x", ErrOutOfBounds, rem.Name, r.Remote)
	case validate.OutOfBounds:
		return fmt.Errorf("%w: %#x+%d runs past the end of its buffer in segment %q", ErrOutOfBounds, r.Remote, n, rem.Name)
	case validate.Permission:
		b := rem.Desc.Buffers[v.Buffer]
		return fmt.Errorf("%w: segment %q buffer at %#x is %s; a %s is not allowed", ErrPermission, rem.Name, b.Base, b.Perm, r.Op)
	}
	return fmt.Errorf("%w: %v", ErrInvalid, f)
}
