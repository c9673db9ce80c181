package host

import (
	"context"
	"time"

	"github.com/ferrydev/ferry/host/metrics"
	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/path"
	"github.com/ferrydev/ferry/host/remotes"
	"github.com/ferrydev/ferry/host/supervisor"
	"github.com/ferrydev/ferry/host/trace"
	"github.com/ferrydev/ferry/sdk"
)

// EngineStatus is what an engine reports of itself, to its application
// (Engine.Status) and to operators through its control service (`ferry
// status`, `ferry top`, `ferry plugins --engine`). Its types are this
// package's: the sub-packages that keep each part may change theirs.
type EngineStatus struct {
	// Format is StatusFormat of the engine that wrote it; a reader that
	// knows another refuses it rather than misread it.
	Format      int    `json:"format"`
	Name        string `json:"name"`
	Incarnation uint64 `json:"incarnation"`
	MachineID   string `json:"machine_id"`
	Control     string `json:"control"`
	Metastore   string `json:"metastore"` // kind, and the URL when it has one
	// MetastoreOK is "ok" while the engine's descriptor is kept alive in
	// the metastore, and the latest error while it cannot be (the
	// metastore is unreachable or lost the lease). Transfers to peers
	// already open go on meanwhile; it is "ok" again once the descriptor
	// is back.
	MetastoreOK string `json:"metastore_health"`
	// MetastoreWatches says what each metastore watch is doing (the
	// segments it follows, and its own descriptor's guard): "segments:
	// watching since T", or "retrying since T (N failed starts): the
	// last error". A watch that is retrying leaves peers' restarts to be
	// learnt from failed transfers, or the engine's key unguarded until
	// the next lease refresh.
	MetastoreWatches []string `json:"metastore_watches,omitempty"`
	// DescriptorsRefused counts the peer descriptors this engine refused
	// as unsigned or badly signed (always 0 without a cluster secret);
	// PublishRepairs, the times it wrote its own descriptor back after
	// someone else replaced or deleted it.
	DescriptorsRefused uint64         `json:"descriptors_refused"`
	PublishRepairs     uint64         `json:"publish_repairs"`
	Plugins            []PluginStatus `json:"plugins"`
	// Rails are every rail of every running transport: its statistics
	// (bytes, slices, in flight, learnt bandwidth, errors) and health.
	Rails []RailStatus `json:"rails"`
	// Segments are the open remote segments; Failures the latest failed
	// attempts, newest first, of FailuresSeen in all.
	Segments     []SegmentStatus `json:"segments"`
	Failures     []Failure       `json:"failures"`
	FailuresSeen uint64          `json:"failures_seen"`
	// Traces are the stories of traced tasks (a trace block): the
	// finished ones, newest first, then those in progress.
	Traces []TaskTrace `json:"traces,omitempty"`
	// Admission says how requests are admitted: "pass-through" (every
	// request now), or the type of the Admitter the application set.
	Admission string `json:"admission"`
	// QoS is the admission queue of the qos block.
	QoS QoSStatus `json:"qos"`
	// Credit is the engine's credit at each receiver it sent to over a
	// two-sided transport, in no order; nil when credit is off.
	Credit []CreditStats `json:"credit,omitempty"`
	// Notifications counts the notifications sent and received.
	Notifications NotificationStats `json:"notifications"`
	// Devices are the configured device plugins (device blocks): not
	// started until device memory is first used, running with their
	// devices, or unavailable with the reason. Staging is the staging
	// pool, once device memory made the engine allocate it.
	Devices []DeviceStatus `json:"devices,omitempty"`
	Staging *StagingStatus `json:"staging,omitempty"`
}

// DeviceStatus is one configured device plugin.
type DeviceStatus struct {
	Name      string `json:"name"`
	State     string `json:"state"` // "not started", "running", "unavailable: <reason>"
	Kind      string `json:"kind,omitempty"`
	Simulated bool   `json:"simulated,omitempty"`
	Pid       int    `json:"pid,omitempty"`
	Runs      int    `json:"runs"`
	// Regions is how many registered device ranges it imported.
	Regions int                `json:"regions"`
	Devices []DeviceAttrStatus `json:"devices,omitempty"`
}

// DeviceAttrStatus is one device of a device plugin.
type DeviceAttrStatus struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	UUID     string `json:"uuid,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
	NUMANode int    `json:"numa_node"`
	Memory   uint64 `json:"memory"`
	Peers    []int  `json:"peers,omitempty"`
	Link     string `json:"link,omitempty"`
}

// StagingStatus is the staging pool: its slots, how many are out (this
// engine's staged requests and its peers'), and how often a request
// waited for one.
type StagingStatus struct {
	Slots    int    `json:"slots"`
	SlotSize uint64 `json:"slot_size"`
	Used     int    `json:"used"`
	Waits    uint64 `json:"waits"`
}

// StatusFormat is the version of EngineStatus's JSON form. Fields added
// keep it; a key renamed or a meaning changed bumps it. Format 2 spells
// every key in snake_case (format 1 had "Counters", "PausedUntil" and a
// plugin rail's "Name", "NUMANode" and "BandwidthGbps").
const StatusFormat = 2

// StatusOption narrows what Status gathers.
type StatusOption func(*statusOptions)

type statusOptions struct{ noCounters bool }

// SkipPluginCounters makes Status ask no plugin anything: each
// PluginStatus's Counters is nil, and Status costs a few locks. For a
// caller that polls.
func SkipPluginCounters() StatusOption { return func(o *statusOptions) { o.noCounters = true } }

// Status reports the engine: who it is, its metastore, its plugins, rails
// and open segments, the latest failures, traces, admission, credit and
// notifications. It asks each running plugin for its counters, within ctx
// (see SkipPluginCounters).
func (e *Engine) Status(ctx context.Context, opts ...StatusOption) EngineStatus {
	var o statusOptions
	for _, f := range opts {
		f(&o)
	}
	ps := e.x.Plugins()
	st := EngineStatus{Format: StatusFormat, Name: e.name, Incarnation: e.incarnation, MachineID: e.machineID, Control: e.controlAddr,
		Metastore: e.cfg.Metastore.Kind, MetastoreOK: "ok", Admission: e.admitter,
		DescriptorsRefused: e.signer.Refused(), PublishRepairs: e.pub.Repaired(),
		Plugins: pluginStatuses(ctx, ps, !o.noCounters), Segments: segmentStatuses(e.segs, ps, e.machineID),
		QoS: qosStatus(e.x.QoS()), Notifications: NotificationStats(e.hc.Stats()),
	}
	if e.metaURL != "" {
		st.Metastore += " " + e.metaURL
	}
	if err := e.pub.Health(); err != nil {
		st.MetastoreOK = err.Error()
	}
	for _, w := range metastoreWatches(e.dir, e.pub) {
		st.MetastoreWatches = append(st.MetastoreWatches, w.Name+": "+w.String())
	}
	for _, r := range path.RailStatuses(ps) {
		st.Rails = append(st.Rails, RailStatus{Transport: r.Transport, Index: r.Index, Name: r.Name, Label: r.Label, NUMANode: r.NUMANode,
			NominalGbps: r.NominalGbps, Bytes: r.Bytes, Slices: r.Slices, InFlight: r.InFlight, EWMAGbps: r.EWMAGbps, Errors: r.Errors,
			Paused: r.Paused, PausedUntil: r.PausedUntil})
	}
	fs, seen := e.x.Failures()
	st.Failures, st.FailuresSeen = make([]Failure, len(fs)), seen
	for i, f := range fs {
		st.Failures[i] = Failure{Time: f.Time, Segment: f.Segment, Op: f.Op.String(), Length: f.Length, Transport: f.Transport, Rail: f.Rail,
			Status: f.Status.String(), Retried: f.Retried}
		if f.Cause != nil {
			st.Failures[i].Cause = f.Cause.Error()
		}
	}
	if e.trace != nil {
		for _, s := range e.trace.Stories() {
			st.Traces = append(st.Traces, taskTrace(s))
		}
	}
	for _, d := range e.devs.Statuses() {
		ds := DeviceStatus{Name: d.Name, State: d.State, Kind: string(d.Kind), Simulated: d.Simulated, Pid: d.Pid, Runs: d.Runs, Regions: d.Regions}
		for _, a := range d.Devices {
			ds.Devices = append(ds.Devices, DeviceAttrStatus{Index: a.Index, Name: a.Name, UUID: a.UUID, PCIBusID: a.PCIBusID, NUMANode: a.NUMANode,
				Memory: a.Memory, Peers: a.Peers, Link: a.Link})
		}
		st.Devices = append(st.Devices, ds)
	}
	if pool, _ := e.x.StagingPool(); pool != nil {
		ps := pool.Stats()
		st.Staging = &StagingStatus{Slots: ps.Slots, SlotSize: pool.SlotSize(), Used: ps.Used, Waits: ps.Waits}
	}
	for _, c := range e.x.CreditStats() {
		st.Credit = append(st.Credit, CreditStats{Segment: c.Segment, Window: c.Window, Requests: c.Requests, InUse: c.InUse, InFlight: c.InFlight,
			Grants: c.Grants, Refused: c.Refused, Waits: c.Waits, Resets: c.Resets})
	}
	return st
}

// PluginStatus is what the engine knows of one configured plugin.
type PluginStatus struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	SHA256   string `json:"sha256"`
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
	// State is "running", "restarting" (its process exited; the engine
	// is starting it again), "unavailable" or "failed"; Reason says why.
	State    string `json:"state"`
	Reason   string `json:"reason,omitempty"`
	Restarts uint64 `json:"restarts"` // runs started after the first
	// PID is the current run's process id; 0 when none runs.
	PID int `json:"pid"`
	// Stalls counts the runs the engine found stalled and killed.
	Stalls uint64 `json:"stalls"`
	// Faulty counts the runs the engine found faulty and killed: they
	// broke the completion contract as often as the supervise block's
	// contract_violations allow within contract_window.
	Faulty uint64 `json:"faulty"`
	// Completions of every run that broke the contract, dropped and
	// counted: tokens that name no slice the engine sent, duplicates, and
	// byte counts above what the slice carried (that slice failed).
	UnknownCompletions   uint64 `json:"unknown_completions"`
	DuplicateCompletions uint64 `json:"duplicate_completions"`
	OverlongCompletions  uint64 `json:"overlong_completions"`
	// Outstanding is how many descriptors the current run holds:
	// submitted to its lanes and not completed.
	Outstanding int64 `json:"outstanding"`
	// LastExit says why the previous run ended, "" while the first runs.
	LastExit string     `json:"last_exit,omitempty"`
	Rails    []sdk.Rail `json:"rails,omitempty"`
	// Counters are the plugin's own, when it answered, less those of
	// Served; nil with SkipPluginCounters.
	Counters map[string]uint64 `json:"counters"`
	// Served is the traffic the plugin served peers (this engine the
	// target of their writes and reads), per peer, rail and op; ServedKnown
	// says the plugin counts it (an older plugin, or one that cannot see
	// it, leaves it unknown). Both unset with SkipPluginCounters.
	Served      []ServedStatus `json:"served,omitempty"`
	ServedKnown bool           `json:"served_known"`
	// Upgrade is the latest live upgrade (Engine.UpgradePlugin), nil
	// before any; Upgrades and UpgradesFailed count the upgrades
	// committed and those whose new binary did not start.
	Upgrade        *UpgradeStatus `json:"upgrade,omitempty"`
	Upgrades       uint64         `json:"upgrades"`
	UpgradesFailed uint64         `json:"upgrades_failed"`
	// Draining is how many descriptors the runs an upgrade replaced
	// still hold while they drain.
	Draining int64 `json:"draining,omitempty"`
}

// ServedStatus is the traffic a plugin served one peer (its engine name)
// on one rail (its index in the plugin's Rails), of one op: "write" (the
// peer wrote into this engine) or "read" (it read from it).
type ServedStatus = metrics.Served

// UpgradeStatus is what a plugin's latest live upgrade did
// (supervisor.UpgradeStatus, which documents its fields).
type UpgradeStatus = supervisor.UpgradeStatus

func upgradeStatus(u *supervisor.UpgradeStatus) *UpgradeStatus {
	if u == nil {
		return nil
	}
	c := *u // the caller's copy, not the supervisor's
	return &c
}

// pluginStatuses reports every configured plugin; ask says to ask the
// running ones for their counters, within ctx.
func pluginStatuses(ctx context.Context, ps []*path.Plugin, ask bool) []PluginStatus {
	var out []PluginStatus
	for _, p := range ps {
		var st supervisor.Status
		if ask {
			st = p.Supervised().Status(ctx)
		} else {
			st = p.Supervised().Peek()
		}
		counters, served, known := metrics.SplitServed(st.Counters)
		out = append(out, PluginStatus{
			Name: p.Name(), Path: st.Path, SHA256: st.SHA256, Version: st.Version, Protocol: st.Protocol,
			State: st.State, Reason: st.Reason, Restarts: st.Restarts, PID: st.PID, Stalls: st.Stalls, Faulty: st.Faulty,
			UnknownCompletions: st.Violations.Unknown, DuplicateCompletions: st.Violations.Duplicate, OverlongCompletions: st.Violations.Overlong,
			Outstanding: st.Outstanding, LastExit: st.LastExit, Rails: st.Rails, Counters: counters,
			Upgrade: upgradeStatus(st.Upgrade), Upgrades: st.Upgrades, UpgradesFailed: st.UpgradesFailed, Draining: st.Draining,
			Served: served, ServedKnown: known,
		})
	}
	return out
}

// RailStatus is one rail of one transport, as the engine sees it.
type RailStatus struct {
	Transport string `json:"transport"`
	Index     int    `json:"index"`           // the rail's number in the transport (descriptor Rail)
	Name      string `json:"name"`            // the plugin's name for it (tcp: the listen address)
	Label     string `json:"label,omitempty"` // the rail block naming it, "" if none
	NUMANode  int    `json:"numa_node"`       // -1 when unknown
	// NominalGbps is what the probe or the rail block said; 0 unknown.
	NominalGbps float64 `json:"nominal_gbps"`
	Bytes       uint64  `json:"bytes"`     // bytes of slices that completed successfully
	Slices      uint64  `json:"slices"`    // slices that completed successfully
	InFlight    uint64  `json:"in_flight"` // bytes sent and not yet done
	EWMAGbps    float64 `json:"ewma_gbps"` // the learnt bandwidth
	Errors      uint64  `json:"errors"`    // failed slices
	Paused      bool    `json:"paused"`
	// PausedUntil is when a paused rail is tried again ("PausedUntil" in
	// StatusFormat 1).
	PausedUntil time.Time `json:"paused_until"`
}

// SegmentStatus is one open remote segment as `ferry status` shows it.
type SegmentStatus struct {
	ID          SegmentID `json:"id"`
	Name        string    `json:"name"`
	Incarnation uint64    `json:"incarnation"`
	SameMachine bool      `json:"same_machine"`
	Transports  []string  `json:"transports"` // open in this engine
	Buffers     int       `json:"buffers"`
	Retired     string    `json:"retired,omitempty"`
	Gone        string    `json:"gone,omitempty"`
}

// segmentStatuses lists the open remote segments of an engine on
// machineID whose plugins are ps.
func segmentStatuses(segs *remotes.Table, ps []*path.Plugin, machineID string) []SegmentStatus {
	var out []SegmentStatus
	for _, h := range segs.All() {
		s := SegmentStatus{ID: SegmentID(h.ID), Name: h.Name, Retired: h.Retired, Gone: h.Gone}
		if h.Desc != nil {
			s.Incarnation, s.SameMachine, s.Buffers = h.Desc.Incarnation, h.Desc.MachineID == machineID, len(h.Desc.Buffers)
		}
		s.Transports = openIn(h, ps)
		out = append(out, s)
	}
	return out
}

// openIn names the plugins of ps that have h's peer open.
func openIn(h *remotes.Handle, ps []*path.Plugin) []string {
	var out []string
	for i, ok := range h.Opened {
		if ok {
			out = append(out, ps[i].Name())
		}
	}
	return out
}

// Failure is one failed attempt of a task, as `ferry status` lists the
// latest: when, to which segment, over what, and why; Retried says the
// engine took it for another attempt.
type Failure struct {
	Time      time.Time `json:"time"`
	Segment   string    `json:"segment"`
	Op        string    `json:"op"`
	Length    uint64    `json:"length"`
	Transport string    `json:"transport,omitempty"`
	Rail      int       `json:"rail"` // -1 when no rail was named
	Status    string    `json:"status"`
	Cause     string    `json:"cause,omitempty"`
	Retried   bool      `json:"retried"`
}

// TaskTrace is the story of one traced task (a trace block), from Queued
// to Ended: its stages with their times, transports, attempts, slices,
// the selector's reasons for each route, and the cause of each failed
// attempt.
type TaskTrace struct {
	Batch    uint64    `json:"batch"`
	Task     int       `json:"task"`
	Op       string    `json:"op"`
	Length   uint64    `json:"length"`
	Priority string    `json:"priority"`
	Started  time.Time `json:"started"`
	// Done says the task ended; Took is how long from Queued to Ended,
	// in microseconds.
	Done  bool        `json:"done"`
	Took  float64     `json:"took_us,omitempty"`
	Steps []TraceStep `json:"steps"`
}

// TraceStep is one stage of a TaskTrace.
type TraceStep struct {
	Stage string `json:"stage"`
	// At is when, in microseconds since the task was queued.
	At        float64 `json:"at_us"`
	Attempt   int     `json:"attempt"`
	Transport string  `json:"transport,omitempty"`
	Slices    int64   `json:"slices,omitempty"`
	// Status is a Completed step's first failing slice status ("" when
	// all slices were OK); State an Ended step's terminal state.
	Status string `json:"status,omitempty"`
	State  string `json:"state,omitempty"`
	// From and Cause are a Retried step's failed transport and why.
	From  string `json:"from,omitempty"`
	Cause string `json:"cause,omitempty"`
	Err   string `json:"error,omitempty"`
	// Reasons is a Routed step's selector explanation: why this
	// transport, and why not each other.
	Reasons string `json:"reasons,omitempty"`
}

// taskTrace formats s, a trace.Recorder's story of one task.
func taskTrace(s trace.Story) TaskTrace {
	t := TaskTrace{Started: s.Started, Done: s.Done(), Steps: make([]TraceStep, len(s.Events))}
	var start int64 // the clock at Queued
	if len(s.Events) > 0 {
		q := &s.Events[0]
		t.Batch, t.Task, t.Length, t.Priority, start = q.Batch, q.Task, q.Length, q.Priority.String(), q.At
		if q.Op != 0 {
			t.Op = q.Op.String()
		}
	}
	since := func(at int64) float64 { // in microseconds; 0 when untimed
		if at == 0 || start == 0 {
			return 0
		}
		return float64(at-start) / 1e3
	}
	for i, ev := range s.Events {
		st := TraceStep{Stage: ev.Stage.String(), At: since(ev.At), Attempt: ev.Attempt, Transport: ev.Transport, Slices: ev.Slices,
			From: ev.From, Cause: ev.Cause, Reasons: ev.Reasons}
		switch ev.Stage {
		case observe.Completed:
			if ev.Status != 0 {
				st.Status = ev.Status.String()
			}
		case observe.Ended:
			st.State = ev.State.String()
			t.Took = st.At
		}
		if ev.Err != nil {
			st.Err = ev.Err.Error()
		}
		t.Steps[i] = st
	}
	return t
}

// QoSStatus is what the admission queue of the qos block reports.
type QoSStatus struct {
	// On: the configuration has a qos block.
	On bool `json:"on"`
	// Held is how many requests are held back now; HeldTotal how many
	// were held back since the engine started.
	Held      int    `json:"held"`
	HeldTotal uint64 `json:"held_total"`
	// Dropped counts held-back requests that ended while held (canceled,
	// past their deadline) and were never dispatched.
	Dropped uint64 `json:"dropped"`
	// Bandwidth is the measured bandwidth, bytes per second; 0 before
	// any. With reject_late, that of completions while something is in
	// flight; otherwise that of the bytes admitted since the reading
	// before, at least 10 ms before.
	Bandwidth float64 `json:"bandwidth"`
	// Tenants are each tenant's counters, the default tenant's included.
	Tenants []TenantStats `json:"tenants,omitempty"`
}

// TenantStats is one tenant of the qos block.
type TenantStats struct {
	Name string `json:"name"`
	// Admitted counts requests dispatched (at once or from the queue);
	// Rejected those refused (busy, late); Bytes the bytes dispatched.
	Admitted uint64 `json:"admitted"`
	Rejected uint64 `json:"rejected"`
	Bytes    uint64 `json:"bytes"`
	// Queued is how many it has held back now.
	Queued int `json:"queued"`
}

func qosStatus(q path.QoSStatus) QoSStatus {
	s := QoSStatus{On: q.On, Held: q.Held, HeldTotal: q.HeldTotal, Dropped: q.Dropped, Bandwidth: q.Bandwidth}
	for _, t := range q.Tenants {
		s.Tenants = append(s.Tenants, TenantStats(t))
	}
	return s
}

// CreditStats is this engine's receiver credit at one receiver, as a
// sender (docs/credit.md).
type CreditStats struct {
	Segment  string `json:"segment"`
	Window   uint64 `json:"window"`    // bytes granted now
	Requests uint32 `json:"requests"`  // requests granted now
	InUse    uint64 `json:"in_use"`    // bytes taken, not given back
	InFlight uint32 `json:"in_flight"` // requests taken, not given back
	Grants   uint64 `json:"grants"`    // grants accepted
	Refused  uint64 `json:"refused"`   // grants refused
	Waits    uint64 `json:"waits"`     // takes that found no credit
	Resets   uint64 `json:"resets"`    // the receiver's losses
}

// NotificationStats counts the notifications an engine sent and
// received.
type NotificationStats struct {
	Received     uint64 `json:"received"`      // delivered to Notifications()
	Duplicates   uint64 `json:"duplicates"`    // retries of a delivered notification, acknowledged, not delivered again
	Refused      uint64 `json:"refused"`       // refused: the buffer (or the sender's fair share of it) was full, or an older incarnation was addressed
	Forged       uint64 `json:"forged"`        // refused: not signed with this engine's cluster secret, or outside the replay window
	Invalid      uint64 `json:"invalid"`       // refused: a field missing or over its bound
	StatusDenied uint64 `json:"status_denied"` // control Status calls refused: not signed with the cluster secret
	Sent         uint64 `json:"sent"`          // notifications a peer acknowledged
	SendFailed   uint64 `json:"send_failed"`   // notifications given up after the retries
	NotSent      uint64 `json:"not_sent"`      // SubmitWithNotify submissions that did not all complete
}
