package rails

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Status is one rail of one transport, as the engine sees it; the
// engine's status formats it (host.RailStatus).
type Status struct {
	Transport string
	Index     int    // the rail's number in the transport (descriptor Rail)
	Name      string // the plugin's name for it (tcp: the listen address)
	Label     string // the rail block naming it, "" if none
	NUMANode  int    // -1 when unknown
	// NominalGbps is what the probe or the rail block said; 0 unknown.
	NominalGbps float64
	RailStats
	// PausedUntil is when a paused rail is tried again.
	PausedUntil time.Time
}

// Set spreads one transport's slices over its rails and keeps their
// statistics: a Sprayer, fed with every slice sent and every completion
// reaped (a token names its rail). The engine keeps one per plugin; it
// outlives the plugin's restarts so that what was learnt of the rails is
// kept. Unlike the Sprayer it is safe for concurrent use: submitters and
// reapers call it from many goroutines.
//
// Completions carry no send time, so each rail keeps the sizes and send
// times of its slices in order; a completion takes the oldest. Slices of
// one rail complete about in order, and the sizes matter only in sum: in
// flight is exact whenever the rail drains.
type Set struct {
	transport string
	info      []Status // static part: Transport, Index, Name, Label, NUMANode, NominalGbps
	byName    map[string]int

	// policyMask[i] is the rails policy i allows here (0: all).
	policyMask []uint64

	// single: the transport has one rail. There is nothing to choose, so
	// the sprayer and its lock stay out of the per-slice path; one keeps
	// the rail's counters in atomics.
	single bool
	one    oneRail

	mu   sync.Mutex
	sp   *Sprayer
	sent []sentFIFO
}

type sentSlice struct {
	bytes uint64
	at    time.Time
}

// sentFIFO is a queue that reuses its array: no allocation once grown.
type sentFIFO struct {
	q    []sentSlice
	head int
}

func (f *sentFIFO) push(s sentSlice) {
	if f.head > 0 && f.head == len(f.q) {
		f.q, f.head = f.q[:0], 0
	} else if f.head > 1024 && f.head*2 > len(f.q) {
		n := copy(f.q, f.q[f.head:])
		f.q, f.head = f.q[:n], 0
	}
	f.q = append(f.q, s)
}

func (f *sentFIFO) pop() (sentSlice, bool) {
	if f.head == len(f.q) {
		return sentSlice{}, false
	}
	s := f.q[f.head]
	f.head++
	return s, true
}

// Block is what a rail block of the configuration says of one rail: the
// label it gives the rail Device of Transport, and what it overrides of
// the probe.
type Block struct {
	Name      string // the label
	Transport string
	Device    string // the plugin's name for the rail
	// NUMANode overrides the probe's; nil keeps it.
	NUMANode *int
	// BandwidthGbps overrides the probe's; 0 keeps it.
	BandwidthGbps float64
}

// NewSet builds the rails of transport from its probe, with what the rail
// blocks of the configuration say about them and the rails each policy
// allows (policyRails[i], by label or name, is policy i's list; empty: all).
// A plugin that reports no rail gets one named after it; rails past
// progress.MaxRails (a token's rail field) are left out.
func NewSet(transport string, probed []sdk.Rail, blocks []Block, policyRails [][]string) *Set {
	if len(probed) == 0 {
		probed = []sdk.Rail{{Name: transport, NUMANode: -1}}
	}
	if len(probed) > progress.MaxRails {
		probed = probed[:progress.MaxRails]
	}
	s := &Set{transport: transport, byName: make(map[string]int), sent: make([]sentFIFO, len(probed))}
	spec := make([]Rail, len(probed))
	for i, p := range probed {
		st := Status{Transport: transport, Index: i, Name: p.Name, NUMANode: p.NUMANode, NominalGbps: p.BandwidthGbps}
		for _, b := range blocks {
			if b.Transport != transport || b.Device != p.Name {
				continue
			}
			st.Label = b.Name
			if b.NUMANode != nil {
				st.NUMANode = *b.NUMANode
			}
			if b.BandwidthGbps > 0 {
				st.NominalGbps = b.BandwidthGbps
			}
		}
		s.info = append(s.info, st)
		s.byName[p.Name] = i
		if st.Label != "" {
			s.byName[st.Label] = i
		}
		spec[i] = Rail{Name: p.Name, NUMANode: st.NUMANode, NominalGbps: st.NominalGbps}
	}
	s.sp = New(spec, Options{})
	s.single = len(s.info) == 1
	for _, names := range policyRails {
		s.policyMask = append(s.policyMask, s.Mask(names))
	}
	return s
}

// Rails returns the static part of every rail (Transport, Index, Name,
// Label, NUMANode, NominalGbps), in index order. The caller must not
// modify it.
func (s *Set) Rails() []Status { return s.info }

// Has reports whether name is a rail here, by rail block label or by the
// plugin's own name for it.
func (s *Set) Has(name string) bool {
	_, ok := s.byName[name]
	return ok
}

// All returns allowed, or every rail's bit when allowed is 0 (all).
func (s *Set) All(allowed uint64) uint64 {
	if allowed != 0 {
		return allowed
	}
	return 1<<len(s.info) - 1
}

// Single reports whether the transport has one rail: Pick then always
// answers 0.
func (s *Set) Single() bool { return s.single }

// Allowed returns the rails policy pol allows (0: all; pol -1: none
// applies).
func (s *Set) Allowed(pol int) uint64 {
	if pol < 0 || pol >= len(s.policyMask) {
		return 0
	}
	return s.policyMask[pol]
}

// SameRails reports whether probed names the rails s was built from.
func (s *Set) SameRails(probed []sdk.Rail) bool {
	if len(probed) == 0 {
		return len(s.info) == 1 && s.info[0].Name == s.transport
	}
	return slices.EqualFunc(probed[:min(len(probed), progress.MaxRails)], s.info, func(p sdk.Rail, r Status) bool { return p.Name == r.Name })
}

// Mask returns the bitmask of the rails named (labels or plugin names)
// that are rails here; 0, for all, when names is empty.
func (s *Set) Mask(names []string) (m uint64) {
	for _, n := range names {
		if i, ok := s.byName[n]; ok {
			m |= 1 << i
		}
	}
	return m
}

// Pick chooses the rail for a slice of bytes among those in allowed (0:
// all) and records it as sent. now is called only when there is a choice
// to make (more than one rail), so that a caller can read the clock once
// for many slices, or not at all. When every allowed rail is paused the
// slice still goes out, on the one paused longest ago: pausing steers
// traffic between rails, it does not stop a transport that has no other.
func (s *Set) Pick(bytes uint64, allowed uint64, now func() time.Time) int {
	if s.single {
		s.one.sent(bytes)
		return 0
	}
	t := now()
	s.mu.Lock()
	i := s.sp.PickAmong(bytes, -1, allowed, t)
	if i < 0 {
		i = s.leastPaused(allowed)
	}
	s.sp.Sent(i, bytes, t)
	s.sent[i].push(sentSlice{bytes, t})
	s.mu.Unlock()
	return i
}

// Picked holds the bytes a submitter put on a single-rail set and has not
// counted there yet (PickFor, Count): one atomic add a publication
// instead of one a slice. A locked add is a full barrier, which on
// far-apart cores waits for the ring slot and the records the request
// had just written (see progress.Batch.CutRun). The zero value holds
// nothing; one submitter uses it at a time.
type Picked struct {
	set   *Set
	bytes uint64
}

// PickFor is Pick for a submitter that counts a single-rail set's bytes
// in p, and Counts them before it publishes the slices.
func (s *Set) PickFor(p *Picked, bytes uint64, allowed uint64, now func() time.Time) int {
	if !s.single {
		return s.Pick(bytes, allowed, now)
	}
	if p.set != s {
		p.Count()
		p.set = s
	}
	p.bytes += bytes
	return 0
}

// UnsentFor is Unsent of a slice PickFor picked with p.
func (s *Set) UnsentFor(p *Picked, rail int, bytes uint64) {
	if s.single && p.set == s {
		p.bytes -= bytes
		return
	}
	s.Unsent(rail, bytes)
}

// Count adds what p holds to its set's bytes in flight. The submitter
// calls it before it publishes what it picked, so that no completion of
// those slices is reaped before their bytes were counted sent.
func (p *Picked) Count() {
	if p.bytes != 0 {
		p.set.one.sent(p.bytes)
		p.bytes = 0
	}
}

// leastPaused returns the allowed rail whose pause ends first; s.mu held.
func (s *Set) leastPaused(allowed uint64) int {
	best := -1
	mon := s.sp.Monitor()
	for i := range s.info {
		if allowed != 0 && allowed&(1<<i) == 0 {
			continue
		}
		if best < 0 || mon.PausedUntil(i).Before(mon.PausedUntil(best)) {
			best = i
		}
	}
	return max(best, 0)
}

// Unsent takes back the latest pick on rail i: the slice was not
// published.
func (s *Set) Unsent(i int, bytes uint64) {
	if s.single {
		s.one.unsent(bytes)
		return
	}
	s.mu.Lock()
	f := &s.sent[i]
	if len(f.q) > f.head {
		f.q = f.q[:len(f.q)-1]
	}
	s.sp.Forget(i, bytes)
	s.mu.Unlock()
}

// Reaped is told of a lane's reaped completions (through the engine's
// progress.Hook): each completion ends the oldest slice in flight on its
// rail, at the time of the call.
func (s *Set) Reaped(ds []ring.Descriptor) {
	if s.single {
		s.one.reaped(ds)
		return
	}
	s.reapedAt(ds, time.Now())
}

// reapedAt is Reaped with the time given.
func (s *Set) reapedAt(ds []ring.Descriptor, now time.Time) {
	s.mu.Lock()
	for k := range ds {
		d := &ds[k]
		i := progress.TokenRail(d.Token)
		if i >= len(s.sent) {
			continue
		}
		sl, ok := s.sent[i].pop()
		if !ok {
			continue // a completion of a slice sent before a reset
		}
		switch {
		case d.Status == ring.StatusOK:
			s.sp.Done(i, sl.bytes, sl.at, now, true)
		case PathFault(d.Status):
			s.sp.Done(i, sl.bytes, sl.at, now, false)
		default:
			// The request was refused for what it asked, not for how it
			// travelled: not the rail's fault.
			s.sp.Forget(i, sl.bytes)
		}
	}
	s.mu.Unlock()
}

// PathFault reports whether a slice status blames the path it took (the
// rail, the transport), rather than what the request asked.
func PathFault(st ring.Status) bool {
	switch st {
	case ring.StatusPeerUnreachable, ring.StatusIO, ring.StatusTimeout, ring.StatusProtocol:
		return true
	}
	return false
}

// ForgetAll drops everything in flight: the plugin that carried it died
// and its tasks were failed; nothing of it will complete.
func (s *Set) ForgetAll() {
	if s.single {
		s.one.forget()
		return
	}
	s.mu.Lock()
	for i := range s.sent {
		f := &s.sent[i]
		for {
			sl, ok := f.pop()
			if !ok {
				break
			}
			s.sp.Forget(i, sl.bytes)
		}
	}
	s.mu.Unlock()
}

// Status returns every rail's state at now.
func (s *Set) Status(now time.Time) []Status {
	if s.single {
		out := []Status{s.info[0]}
		out[0].RailStats = s.one.stats(s.info[0].Name, now)
		return out
	}
	s.mu.Lock()
	st := s.sp.Stats(now)
	mon := s.sp.Monitor()
	out := make([]Status, len(s.info))
	for i := range s.info {
		out[i] = s.info[i]
		out[i].RailStats = st[i]
		if st[i].Paused {
			out[i].PausedUntil = mon.PausedUntil(i)
		}
	}
	s.mu.Unlock()
	return out
}

// oneRail counts a single-rail transport's slices without a lock: the
// submitters write the first cache line, the reapers the second, so the
// two sides of a lane do not bounce a line between cores on every slice.
// Its bandwidth is the rate of bytes between two reads of its stats.
type oneRail struct {
	sentBytes atomic.Uint64 // submit side
	_         [56]byte
	doneBytes atomic.Uint64 // reap side: bytes of slices that came back, ok or not
	bytes     atomic.Uint64
	slices    atomic.Uint64
	errors    atomic.Uint64
	_         [32]byte

	mu       sync.Mutex // status only
	lastAt   time.Time
	lastB    uint64
	lastGbps float64
}

func (o *oneRail) sent(n uint64)   { o.sentBytes.Add(n) }
func (o *oneRail) unsent(n uint64) { o.sentBytes.Add(-n) }

// reaped counts completions. A failed one reports no bytes, so the size
// of its slice is taken as the mean of those that succeeded: in flight is
// exact while nothing fails, and never shown below zero.
func (o *oneRail) reaped(ds []ring.Descriptor) {
	var ok, okN, done, errs uint64
	for k := range ds {
		d := &ds[k]
		if d.Status == ring.StatusOK {
			ok += d.Length
			okN++
			continue
		}
		if PathFault(d.Status) {
			errs++
		}
		if n := o.slices.Load() + okN; n > 0 {
			done += (o.bytes.Load() + ok) / n
		}
	}
	o.bytes.Add(ok)
	o.slices.Add(okN)
	o.doneBytes.Add(ok + done)
	if errs > 0 {
		o.errors.Add(errs)
	}
}

// forget drops what is in flight: its plugin died.
func (o *oneRail) forget() { o.doneBytes.Store(o.sentBytes.Load()) }

func (o *oneRail) stats(name string, now time.Time) RailStats {
	st := RailStats{Name: name, Bytes: o.bytes.Load(), Slices: o.slices.Load(), Errors: o.errors.Load()}
	if sent, done := o.sentBytes.Load(), o.doneBytes.Load(); sent > done {
		st.InFlight = sent - done
	}
	o.mu.Lock()
	if d := now.Sub(o.lastAt); !o.lastAt.IsZero() && d >= 10*time.Millisecond && st.Bytes > o.lastB {
		o.lastGbps = float64(st.Bytes-o.lastB) * 8 / d.Seconds() / 1e9
	}
	if o.lastAt.IsZero() || now.Sub(o.lastAt) >= 10*time.Millisecond {
		o.lastAt, o.lastB = now, st.Bytes
	}
	st.EWMAGbps = o.lastGbps
	o.mu.Unlock()
	return st
}
