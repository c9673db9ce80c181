package selector

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ferrydev/ferry/internal/intent"
	"github.com/ferrydev/ferry/sdk"
)

// Errors that Select and Route return, wrapped with the details.
var (
	// ErrUnknownPolicy: the request names a policy that is not configured.
	ErrUnknownPolicy = errors.New("unknown policy")
	// ErrUnknownTransport: the hint names a transport that is not configured.
	ErrUnknownTransport = errors.New("unknown transport")
	// ErrUnreachable: the hinted transport cannot reach the target. There
	// is no fallback: the caller asked for that transport.
	ErrUnreachable = errors.New("transport cannot reach the target")
	// ErrNoTransport: no transport of the plan can carry the request.
	ErrNoTransport = errors.New("no usable transport")
	// ErrBadRequest: the request's facts are not valid (an unknown intent).
	ErrBadRequest = errors.New("bad request")
)

// Intents a request may declare, as the selector compares them: the text of
// internal/intent's constants, the one list of them. "" declares none.
const (
	IntentForegroundGet      = string(intent.ForegroundGet)
	IntentBackgroundPrefetch = string(intent.BackgroundPrefetch)
	IntentMigration          = string(intent.Migration)
	IntentCheckpoint         = string(intent.Checkpoint)
	IntentWeightLoading      = string(intent.WeightLoading)
)

// intentList names the known intents for error messages.
var intentList = func() string {
	l := make([]string, len(intent.All))
	for i, in := range intent.All {
		l[i] = string(in)
	}
	return strings.Join(l, ", ")
}()

// intentBit returns the mask bit of an intent, 0 for "" and -1 for an
// unknown one. A switch, not a map: it runs per request.
func intentBit(s string) int {
	switch s {
	case "":
		return 0
	case IntentForegroundGet:
		return 1 << 0
	case IntentBackgroundPrefetch:
		return 1 << 1
	case IntentMigration:
		return 1 << 2
	case IntentCheckpoint:
		return 1 << 3
	case IntentWeightLoading:
		return 1 << 4
	}
	return -1
}

// Priority of a request: the SDK's, which the ring descriptor carries.
type Priority = sdk.Priority

const (
	PriorityNormal = sdk.PriorityNormal
	PriorityHigh   = sdk.PriorityHigh
	PriorityLow    = sdk.PriorityLow
)

// SegmentType is the kind of segment a request targets.
type SegmentType uint8

const (
	Memory SegmentType = 0
	File   SegmentType = 1
)

func (t SegmentType) String() string {
	if t == File {
		return "file"
	}
	return "memory"
}

// Any matches every memory kind in a policy.
const Any sdk.MemoryKind = "*"

// Request is what the selector knows of one request.
type Request struct {
	Op       string // "read" or "write"; only for explanations
	Size     uint64
	Priority Priority
	Intent   string // one of Intents, or ""
	// Policy, when set, selects that policy by name, whatever its match
	// conditions say.
	Policy string
	// Hint pins the first attempt to this transport.
	Hint        string
	LocalKind   sdk.MemoryKind // "" means sdk.MemoryCPU
	RemoteKind  sdk.MemoryKind // the target buffer's kind; "" means sdk.MemoryCPU
	Segment     SegmentType
	SameMachine bool
	// LocalForeign and RemoteForeign: the local buffer, or the target
	// buffer, is memory its application allocated itself (not from
	// Engine.Allocate); only a transport with ForeignMemory reaches it.
	LocalForeign, RemoteForeign bool
}

// Transport is one candidate transport for a request, in configured order.
// Name, SameMachineOnly and MemoryKinds are what the plugin declared;
// Opened and Running are the state at the time of the request.
type Transport struct {
	Name            string
	SameMachineOnly bool
	MemoryKinds     []sdk.MemoryKind // empty: any kind
	Opened          bool             // the transport has the target open
	Running         bool
	// ForeignMemory: the transport reaches memory an application
	// allocated itself, by cross-memory attach with one extra copy
	// (sdk.Info.ForeignMemory). A transport without it maps memory.
	ForeignMemory bool
	// ForeignLocalOnly, with ForeignMemory: the transport reaches such
	// memory only on this engine's side, copying it straight to or from
	// the peer's memory it mapped, no extra copy (sdk.Info.ForeignLocalOnly,
	// shm); it cannot reach a target buffer that is such memory.
	ForeignLocalOnly bool
}

// Match is a policy's conditions; the zero Match matches every request.
type Match struct {
	Segment     string         // "memory", "file" or "" for both
	SameMachine *bool          // nil: either
	LocalKind   sdk.MemoryKind // "" or Any: every kind
	RemoteKind  sdk.MemoryKind
	MinSize     uint64 // inclusive
	MaxSize     uint64 // inclusive; 0: no upper bound
	Priorities  []string
	Intents     []string
}

// Policy is one policy as configured.
type Policy struct {
	Name       string
	Match      Match
	Transports []string // in the order to try them
	Rails      []string // allowed rails; kept for the slicer, unused here
}

// compiled is a Policy turned into comparisons.
type compiled struct {
	name       string
	segment    int8 // -1 any
	same       int8 // -1 any, 0 false, 1 true
	local      sdk.MemoryKind
	remote     sdk.MemoryKind
	min, max   uint64
	prios      uint8 // mask; 0: any
	intents    int   // mask; 0: any
	transports []int // into the selector's transports; -1: not enabled here
	names      []string
	rails      []string
	conds      string // the match conditions, for explanations
}

// Selector evaluates compiled policies. It is immutable after New and safe
// for concurrent use.
type Selector struct {
	names    []string // transports in configured order
	policies []compiled
}

// New compiles policies against the engine's transports, named in the
// order the engine tries them by default. A policy may name a transport
// absent from transports (configured but disabled): it is skipped and the
// explanation says so.
func New(policies []Policy, transports []string) (*Selector, error) {
	s := &Selector{names: append([]string(nil), transports...)}
	var errs []error
	seen := map[string]bool{}
	for _, p := range policies {
		fail := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("policy %q: "+format, append([]any{p.Name}, args...)...))
		}
		if p.Name == "" {
			fail("the name is empty")
		}
		if seen[p.Name] {
			fail("declared twice")
		}
		seen[p.Name] = true
		m := p.Match
		c := compiled{name: p.Name, segment: -1, same: -1, local: m.LocalKind, remote: m.RemoteKind, min: m.MinSize, max: m.MaxSize,
			names: append([]string(nil), p.Transports...), rails: append([]string(nil), p.Rails...)}
		var conds []string
		switch m.Segment {
		case "":
		case "memory":
			c.segment = int8(Memory)
		case "file":
			c.segment = int8(File)
		default:
			fail("segment %q: want \"memory\" or \"file\"", m.Segment)
		}
		if m.Segment != "" {
			conds = append(conds, "segment = "+m.Segment)
		}
		if m.SameMachine != nil {
			c.same = 0
			conds = append(conds, "same_machine = false")
			if *m.SameMachine {
				c.same = 1
				conds[len(conds)-1] = "same_machine = true"
			}
		}
		if c.local == Any {
			c.local = ""
		}
		if c.remote == Any {
			c.remote = ""
		}
		if c.local != "" {
			conds = append(conds, "local_memory = "+string(c.local))
		}
		if c.remote != "" {
			conds = append(conds, "remote_memory = "+string(c.remote))
		}
		if m.MaxSize != 0 && m.MinSize > m.MaxSize {
			fail("min_size %d is above max_size %d", m.MinSize, m.MaxSize)
		}
		if m.MinSize != 0 {
			conds = append(conds, "size >= "+FormatSize(m.MinSize))
		}
		if m.MaxSize != 0 {
			conds = append(conds, "size <= "+FormatSize(m.MaxSize))
		}
		for _, pr := range m.Priorities {
			v, err := sdk.ParsePriority(pr)
			if err != nil {
				fail("%w", err)
				continue
			}
			c.prios |= 1 << v
		}
		if len(m.Priorities) > 0 {
			conds = append(conds, "priority in ["+strings.Join(m.Priorities, ", ")+"]")
		}
		for _, in := range m.Intents {
			b := intentBit(in)
			if b <= 0 {
				fail("intent %q: want one of %s", in, intentList)
				continue
			}
			c.intents |= b
		}
		if len(m.Intents) > 0 {
			conds = append(conds, "intent in ["+strings.Join(m.Intents, ", ")+"]")
		}
		if len(p.Transports) == 0 {
			fail("lists no transports")
		}
		for i, t := range p.Transports {
			if indexOf(p.Transports[:i], t) >= 0 {
				fail("transport %q is listed twice", t)
			}
			c.transports = append(c.transports, indexOf(s.names, t))
		}
		if len(conds) == 0 {
			c.conds = "matches every request"
		} else {
			c.conds = strings.Join(conds, ", ")
		}
		s.policies = append(s.policies, c)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func indexOf(l []string, s string) int {
	for i, x := range l {
		if x == s {
			return i
		}
	}
	return -1
}

func (c *compiled) matches(r *Request, bit int) bool {
	switch {
	case c.segment >= 0 && SegmentType(c.segment) != r.Segment:
		return false
	case c.same >= 0 && (c.same == 1) != r.SameMachine:
		return false
	case c.local != "" && c.local != r.LocalKind.OrCPU():
		return false
	case c.remote != "" && c.remote != r.RemoteKind.OrCPU():
		return false
	case r.Size < c.min, c.max != 0 && r.Size > c.max:
		return false
	case c.prios != 0 && (r.Priority > 7 || c.prios&(1<<r.Priority) == 0):
		return false
	case c.intents != 0 && c.intents&bit == 0:
		return false
	}
	return true
}

// Reasons a transport is skipped. Constants, so that Route allocates
// nothing; Explain adds the details.
const (
	reasonNotRunning   = "not running here"
	reasonNotOpened    = "the target does not offer it, or opening the target failed"
	reasonSameMachine  = "same machine only, and the target is on another machine"
	reasonLocalKind    = "does not handle the local memory kind"
	reasonRemoteKind   = "does not handle the target's memory kind"
	reasonFileSegment  = "does not handle file segments"
	reasonLocalForeign = "maps memory for zero copy and cannot reach the local buffer, which the application allocated itself; " +
		"allocate it through Engine.Allocate"
	reasonRemoteForeign = "maps memory for zero copy and cannot reach the target buffer, which the peer's application allocated itself; " +
		"the peer should allocate it through Engine.Allocate"
	reasonRemoteForeignLocal = "maps memory for zero copy and cannot reach the target buffer, which the peer's application allocated itself " +
		"(it reaches such memory only on this engine's side): unsupported; a copying transport such as tcp reaches it, or the peer allocates it through Engine.Allocate"
	reasonNotEnabled   = "not enabled in this engine"
	reasonNotInPolicy  = "not in the policy"
	reasonAfterHint    = "after the hinted transport"
	reasonTakenHint    = "pinned by the request's transport hint"
	reasonTakenPolicy  = "in the policy's order"
	reasonTakenSame    = "same machine: same-machine transports first"
	reasonTakenDefault = "in configured order"
)

// usable says why cands[i] cannot carry r, or "" when it can.
func usable(r *Request, t *Transport) string {
	switch {
	case !t.Running:
		return reasonNotRunning
	case t.SameMachineOnly && !r.SameMachine:
		return reasonSameMachine
	case !t.Opened:
		return reasonNotOpened
	case len(t.MemoryKinds) > 0 && r.Segment == File && !slices.Contains(t.MemoryKinds, sdk.MemoryFile):
		return reasonFileSegment
	case len(t.MemoryKinds) > 0 && r.Segment == Memory && !slices.Contains(t.MemoryKinds, r.RemoteKind.OrCPU()):
		return reasonRemoteKind
	case len(t.MemoryKinds) > 0 && !slices.Contains(t.MemoryKinds, r.LocalKind.OrCPU()):
		return reasonLocalKind
	case r.LocalForeign && !t.ForeignMemory:
		return reasonLocalForeign
	case r.RemoteForeign && !t.ForeignMemory:
		return reasonRemoteForeign
	case r.RemoteForeign && t.ForeignLocalOnly:
		return reasonRemoteForeignLocal
	}
	return ""
}

// policy picks the policy for r: its index, or -1 for none.
func (s *Selector) policy(r *Request) (int, error) {
	bit := intentBit(r.Intent)
	if bit < 0 {
		return -1, fmt.Errorf("%w: intent %q: want one of %s", ErrBadRequest, r.Intent, intentList)
	}
	if r.Policy != "" {
		for i := range s.policies {
			if s.policies[i].name == r.Policy {
				return i, nil
			}
		}
		return -1, fmt.Errorf("%w: %q is not configured", ErrUnknownPolicy, r.Policy)
	}
	for i := range s.policies {
		if s.policies[i].matches(r, bit) {
			return i, nil
		}
	}
	return -1, nil
}

// order calls visit with each transport index in the order r tries them
// (the hint excluded) and its reason for being there, until visit returns
// false. Index -1 stands for a policy's transport that is not enabled; its
// name is policy names[k].
func (s *Selector) order(r *Request, pol int, cands []Transport, visit func(i int, name, why string) bool) {
	if pol >= 0 {
		c := &s.policies[pol]
		for k, i := range c.transports {
			if !visit(i, c.names[k], reasonTakenPolicy) {
				return
			}
		}
		return
	}
	if r.SameMachine {
		for i := range cands {
			if cands[i].SameMachineOnly && !visit(i, cands[i].Name, reasonTakenSame) {
				return
			}
		}
	}
	for i := range cands {
		if (!r.SameMachine || !cands[i].SameMachineOnly) && !visit(i, cands[i].Name, reasonTakenDefault) {
			return
		}
	}
}

func (s *Selector) check(cands []Transport) error {
	if len(cands) != len(s.names) {
		return fmt.Errorf("%w: %d candidate transports for a selector built with %d", ErrBadRequest, len(cands), len(s.names))
	}
	return nil
}

// hint resolves r.Hint: the index of the pinned transport, or -1 when
// there is no hint.
func (s *Selector) hint(r *Request, cands []Transport) (int, error) {
	if r.Hint == "" {
		return -1, nil
	}
	h := indexOf(s.names, r.Hint)
	if h < 0 {
		return -1, fmt.Errorf("%w: transport hint %q: no such transport is enabled (have %s)", ErrUnknownTransport, r.Hint, strings.Join(s.names, ", "))
	}
	if why := usable(r, &cands[h]); why != "" {
		return -1, fmt.Errorf("%w: transport hint %q: %s", ErrUnreachable, r.Hint, why)
	}
	return h, nil
}

// Route returns the index in cands of the transport for r's first attempt,
// and the index (in New's order) of the policy that applies, -1 for none:
// its rails restrict the slices even when a hint chose the transport. It
// is Select without the plan and the explanation, and allocates nothing
// unless it fails. cands must list the transports New was given, in order.
func (s *Selector) Route(r *Request, cands []Transport) (transport, policy int, err error) {
	if err := s.check(cands); err != nil {
		return -1, -1, err
	}
	pol, err := s.policy(r)
	if err != nil {
		return -1, -1, err
	}
	h, err := s.hint(r, cands)
	if err != nil {
		return -1, pol, err
	}
	if h >= 0 {
		return h, pol, nil
	}
	// Not a closure over locals: order's visit would escape them.
	if pol >= 0 {
		for _, i := range s.policies[pol].transports {
			if i >= 0 && usable(r, &cands[i]) == "" {
				return i, pol, nil
			}
		}
	} else {
		if r.SameMachine {
			for i := range cands {
				if cands[i].SameMachineOnly && usable(r, &cands[i]) == "" {
					return i, pol, nil
				}
			}
		}
		for i := range cands {
			if usable(r, &cands[i]) == "" {
				return i, pol, nil
			}
		}
	}
	p, err := s.Select(r, cands) // the error with every reason
	if err == nil {
		return p.Index[0], pol, nil // cannot happen: Select agrees with the loops above
	}
	return -1, pol, err
}

// Plan is a decision and its explanation.
type Plan struct {
	// Transports are the usable transports in the order to try them.
	Transports []string
	// Index holds the position in the candidates of each of Transports.
	Index []int
	// Policy names the policy that decided, "" when none did.
	Policy string
	// Rails are the rails the policy allows; empty: any.
	Rails []string
	// Why says how the policy was chosen: its match conditions, "named
	// by the request", or why no policy applied.
	Why string
	// Hint is the transport the request pinned, if any.
	Hint string
	// Explanation has one step per transport considered, in order,
	// then the transports that were not.
	Explanation []Step
	// Request is the request's facts, for Explain.
	Request Request
}

// Step is one transport's part in a decision.
type Step struct {
	Transport string
	// Taken marks the transport of the first attempt.
	Taken bool
	// Usable marks a transport in Plan.Transports: taken, or a later
	// attempt.
	Usable bool
	Reason string
	// Copy, for a usable transport on memory an application allocated
	// itself: what that memory costs through it ("no extra copy", "one
	// extra copy here"); "" otherwise.
	Copy string
}

// foreignCopy says what memory an application allocated itself costs r
// through t, a transport that can carry r; "" when r has none.
func foreignCopy(r *Request, t *Transport) string {
	switch {
	case !r.LocalForeign && !r.RemoteForeign:
		return ""
	case t.ForeignLocalOnly:
		return "app memory by cross-memory attach straight to or from the peer's mapping, no extra copy"
	case r.LocalForeign && r.RemoteForeign:
		return "app memory by cross-memory attach, one extra copy on each side"
	case r.LocalForeign:
		return "app memory by cross-memory attach, one extra copy here"
	}
	return "app memory by cross-memory attach at the peer, one extra copy there"
}

// Select decides the transports for r and explains the decision. The
// returned Plan explains errors too: on error it holds every step.
func (s *Selector) Select(r *Request, cands []Transport) (Plan, error) {
	p := Plan{Request: *r, Hint: r.Hint}
	if err := s.check(cands); err != nil {
		return p, err
	}
	pol, err := s.policy(r)
	if err != nil {
		return p, err
	}
	switch {
	case pol >= 0 && r.Policy != "":
		p.Policy, p.Why, p.Rails = s.policies[pol].name, "named by the request", s.policies[pol].rails
	case pol >= 0:
		p.Policy, p.Why, p.Rails = s.policies[pol].name, s.policies[pol].conds, s.policies[pol].rails
	case len(s.policies) == 0:
		p.Why = "no policies are configured"
	default:
		p.Why = "no policy matched"
	}
	seen := make([]bool, len(cands))
	h, herr := s.hint(r, cands)
	if r.Hint != "" {
		if hi := indexOf(s.names, r.Hint); hi >= 0 {
			seen[hi] = true
			if herr != nil {
				p.Explanation = append(p.Explanation, Step{Transport: r.Hint, Reason: "hinted, but " + usable(r, &cands[hi])})
			}
		} else {
			p.Explanation = append(p.Explanation, Step{Transport: r.Hint, Reason: "hinted, but no such transport is enabled"})
		}
	}
	if herr != nil {
		return p, herr
	}
	if h >= 0 {
		p.Transports, p.Index = append(p.Transports, cands[h].Name), append(p.Index, h)
		p.Explanation = append(p.Explanation, Step{Transport: cands[h].Name, Taken: true, Usable: true, Reason: reasonTakenHint, Copy: foreignCopy(r, &cands[h])})
	}
	s.order(r, pol, cands, func(i int, name, why string) bool {
		if i < 0 {
			p.Explanation = append(p.Explanation, Step{Transport: name, Reason: reasonNotEnabled})
			return true
		}
		if seen[i] {
			return true
		}
		seen[i] = true
		if bad := usable(r, &cands[i]); bad != "" {
			p.Explanation = append(p.Explanation, Step{Transport: name, Reason: bad})
			return true
		}
		if h >= 0 {
			why = reasonAfterHint
		}
		p.Explanation = append(p.Explanation, Step{Transport: name, Taken: len(p.Transports) == 0, Usable: true, Reason: why, Copy: foreignCopy(r, &cands[i])})
		p.Transports, p.Index = append(p.Transports, name), append(p.Index, i)
		return true
	})
	for i := range cands {
		if !seen[i] {
			p.Explanation = append(p.Explanation, Step{Transport: cands[i].Name, Reason: reasonNotInPolicy})
		}
	}
	if len(p.Transports) == 0 {
		return p, fmt.Errorf("%w: %s", ErrNoTransport, p.reasons())
	}
	return p, nil
}

func (p *Plan) reasons() string {
	var b strings.Builder
	for i, st := range p.Explanation {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(st.Transport + ": " + st.Reason)
	}
	if p.Policy != "" {
		fmt.Fprintf(&b, " (policy %q)", p.Policy)
	}
	return b.String()
}

// Explain renders the plan for people, one line per fact:
//
//	policy "kv-local" matched (same_machine = true, size <= 1MiB)
//	shm: taken (in the policy's order)
//	tcp: considered, skipped: not in the policy
func (p *Plan) Explain() string {
	var b strings.Builder
	r := &p.Request
	fmt.Fprintf(&b, "request: %s %s, priority %s", r.Op, FormatSize(r.Size), r.Priority)
	if r.Intent != "" {
		fmt.Fprintf(&b, ", intent %s", r.Intent)
	}
	where := "another machine"
	if r.SameMachine {
		where = "the same machine"
	}
	fmt.Fprintf(&b, ", %s segment on %s, memory %s -> %s\n", r.Segment, where, r.LocalKind.OrCPU(), r.RemoteKind.OrCPU())
	switch {
	case r.LocalForeign && r.RemoteForeign:
		b.WriteString("both buffers are memory their applications allocated themselves: a transport reaches them by cross-memory attach, " +
			"one extra copy on each side (through a bounce buffer); Engine.Allocate memory avoids it\n")
	case r.LocalForeign:
		b.WriteString("the local buffer is memory the application allocated itself: a transport reaches it by cross-memory attach, " +
			"one extra copy (through a bounce buffer) where it sends the bytes, none where it copies straight to or from the peer's mapping; " +
			"Engine.Allocate memory avoids it\n")
	case r.RemoteForeign:
		b.WriteString("the target buffer is memory the peer's application allocated itself: the peer's transport reaches it by cross-memory attach, " +
			"one extra copy there (through a bounce buffer)\n")
	}
	switch {
	case p.Policy != "" && r.Policy != "":
		fmt.Fprintf(&b, "policy %q: named by the request\n", p.Policy)
	case p.Policy != "":
		fmt.Fprintf(&b, "policy %q matched (%s)\n", p.Policy, p.Why)
	case r.Policy != "":
		fmt.Fprintf(&b, "policy %q: not configured\n", r.Policy)
	default:
		fmt.Fprintf(&b, "%s: default order (same machine prefers same-machine transports, else configured order)\n", p.Why)
	}
	if len(p.Rails) > 0 {
		fmt.Fprintf(&b, "rails allowed: %s\n", strings.Join(p.Rails, ", "))
	}
	if p.Hint != "" {
		fmt.Fprintf(&b, "hint: %s\n", p.Hint)
	}
	for _, st := range p.Explanation {
		why := st.Reason
		if st.Copy != "" {
			why += "; " + st.Copy
		}
		if st.Taken {
			fmt.Fprintf(&b, "%s: taken (%s)\n", st.Transport, why)
		} else if st.Usable {
			fmt.Fprintf(&b, "%s: usable, a later attempt (%s)\n", st.Transport, why)
		} else {
			fmt.Fprintf(&b, "%s: considered, skipped: %s\n", st.Transport, st.Reason)
		}
	}
	return b.String()
}

// FormatSize writes n bytes the way sizes are configured: "4KiB", "1MiB",
// or a plain number when not a whole multiple.
func FormatSize(n uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	u := 0
	for u < len(units)-1 && n >= 1024 && n%1024 == 0 {
		n /= 1024
		u++
	}
	return fmt.Sprintf("%d%s", n, units[u])
}
