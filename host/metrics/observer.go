package metrics

import (
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Namespace prefixes every series.
const Namespace = "ferry"

// NoTransport is the transport label of what happened before a task was
// routed (its queueing, a request refused as invalid).
const NoTransport = "none"

// Stage labels of the stage latency histogram.
const (
	StageQueuedAdmitted     = "queued_admitted"
	StageAdmittedSubmitted  = "admitted_submitted"
	StageSubmittedCompleted = "submitted_completed"
	StageEndToEnd           = "end_to_end"
)

var stageLabels = [...]string{StageQueuedAdmitted, StageAdmittedSubmitted, StageSubmittedCompleted, StageEndToEnd}

const (
	stQueuedAdmitted = iota
	stAdmittedSubmitted
	stSubmittedCompleted
	stEndToEnd
	nStages
)

// The label values of op and priority: ring ops (write 1, read 2) and
// sdk priorities (normal 0, high 1, low 2).
var (
	opLabels   = [...]string{"write", "read"}
	prioLabels = [...]string{sdk.PriorityNormal.String(), sdk.PriorityHigh.String(), sdk.PriorityLow.String()}
)

// terminal states, as state labels: progress.State s is stateLabels[s-1].
var stateLabels = [...]string{
	progress.Completed - 1: "completed", progress.Failed - 1: "failed", progress.Canceled - 1: "canceled",
	progress.Timeout - 1: "timeout", progress.Invalid - 1: "invalid",
}

// LatencyBuckets are the stage histograms' bounds, in seconds: 1 µs to
// about 4 s in steps of 4, which covers a shared-memory slice and a
// multi-gigabyte transfer alike.
var LatencyBuckets = prometheus.ExponentialBuckets(1e-6, 4, 12)

type counterBox struct{ prometheus.Counter }
type histBox struct{ prometheus.Observer }

// cells are one transport's series by op and priority, resolved on first
// use and then read with one atomic load: the data path never hashes
// label values or allocates.
type cells struct {
	queued   [2][3]atomic.Pointer[counterBox]
	requests [2][3][len(stateLabels)]atomic.Pointer[counterBox]
	bytes    [2][3]atomic.Pointer[counterBox]
	misses   [2][3]atomic.Pointer[counterBox]
	cancels  [2][3]atomic.Pointer[counterBox]
	stages   [nStages][2][3]atomic.Pointer[histBox]
}

// Observer counts and times the tasks of one engine from its stage
// events. It is an observe.Observer: attach it with host.WithObserver (the
// engine does when metrics are configured).
type Observer struct {
	transports []string // index 0 is NoTransport
	cells      []cells  // by transport index

	queued    *prometheus.CounterVec
	requests  *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	misses    *prometheus.CounterVec
	cancels   *prometheus.CounterVec
	stages    *prometheus.HistogramVec
	retries   *prometheus.CounterVec
	failovers *prometheus.CounterVec
	// unknown counts events naming a transport the observer was not
	// built with, which it files under NoTransport.
	unknown prometheus.Counter
}

// NewObserver returns an observer for an engine whose plugins are
// transports, in the engine's order; its series carry constLabels.
// Register it (it is also a prometheus.Collector) to export them.
func NewObserver(transports []string, constLabels prometheus.Labels) *Observer {
	tpo := []string{"transport", "op", "priority"}
	o := &Observer{
		transports: append([]string{NoTransport}, transports...),
		queued: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "requests_queued_total", ConstLabels: constLabels,
			Help: "Requests that took their place in a batch (before validation, admission and routing)."}, []string{"op", "priority"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "requests_total", ConstLabels: constLabels,
			Help: "Requests that ended, by the transport of their last attempt (none: never routed) and terminal state."},
			append(tpo[:3:3], "state")),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "bytes_total", ConstLabels: constLabels,
			Help: "Bytes of the requests that completed, by the transport that carried them; rate() of it is the throughput."}, tpo),
		misses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "deadline_misses_total", ConstLabels: constLabels,
			Help: "Requests that ended TIMEOUT: their deadline passed before they completed."}, tpo),
		cancels: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "cancels_total", ConstLabels: constLabels,
			Help: "Requests that ended CANCELED."}, tpo),
		stages: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Name: "stage_duration_seconds", ConstLabels: constLabels,
			Help:    "Time between stages of a request: queued_admitted (validation and admission), admitted_submitted (routing and slicing; a retry's from its failure decision), submitted_completed (in the plugin, per attempt) and end_to_end (queued to ended).",
			Buckets: LatencyBuckets}, append([]string{"stage"}, tpo...)),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "retries_total", ConstLabels: constLabels,
			Help: "Attempts that failed and were tried again, on another rail, another transport or the restarted plugin, by the failed attempt's transport and cause."},
			[]string{"transport", "cause"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "failovers_total", ConstLabels: constLabels,
			Help: "Retries that moved a request to another transport, from the failed attempt's transport to the next one's, by cause."},
			[]string{"from", "to", "cause"}),
		unknown: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "metrics_unknown_transport_events_total", ConstLabels: constLabels,
			Help: "Task events naming a transport the metrics were not set up with, counted under transport none; never more than 0 unless the engine and its metrics disagree."}),
	}
	o.cells = make([]cells, len(o.transports))
	return o
}

// Describe and Collect make the observer a prometheus.Collector of its
// series.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range o.collectors() {
		c.Describe(ch)
	}
}

// Collect: see Describe.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	for _, c := range o.collectors() {
		c.Collect(ch)
	}
}

func (o *Observer) collectors() []prometheus.Collector {
	return []prometheus.Collector{o.queued, o.requests, o.bytes, o.misses, o.cancels, o.stages, o.retries, o.failovers, o.unknown}
}

// transport returns the index of a transport name; a short scan, as an
// engine has a handful of plugins.
func (o *Observer) transport(name string) int {
	if name == "" {
		return 0
	}
	for i := 1; i < len(o.transports); i++ {
		if o.transports[i] == name {
			return i
		}
	}
	o.unknown.Inc()
	return 0
}

func opIndex(op ring.Op) int {
	if op == ring.OpRead {
		return 1
	}
	return 0
}

func prioIndex(p sdk.Priority) int {
	if int(p) < len(prioLabels) {
		return int(p)
	}
	return 0
}

// Observe counts and times one event. It allocates nothing once the
// event's series exist, and takes no lock.
func (o *Observer) Observe(ev observe.Event) {
	op, pr := opIndex(ev.Op), prioIndex(ev.Priority)
	switch ev.Stage {
	case observe.Queued:
		o.counter(&o.cells[0].queued[op][pr], o.queued, 0, op, pr, -1).Inc()
	case observe.Admitted:
		o.stage(stQueuedAdmitted, 0, op, pr, ev)
	case observe.Submitted:
		o.stage(stAdmittedSubmitted, o.transport(ev.Transport), op, pr, ev)
	case observe.Completed:
		o.stage(stSubmittedCompleted, o.transport(ev.Transport), op, pr, ev)
	case observe.Retried:
		o.retried(ev)
	case observe.Ended:
		t := o.transport(ev.Transport)
		c := &o.cells[t]
		if s := int(ev.State) - 1; s >= 0 && s < len(stateLabels) {
			o.counter(&c.requests[op][pr][s], o.requests, t, op, pr, s).Inc()
		}
		switch ev.State {
		case progress.Completed:
			o.counter(&c.bytes[op][pr], o.bytes, t, op, pr, -1).Add(float64(ev.Length))
		case progress.Timeout:
			o.counter(&c.misses[op][pr], o.misses, t, op, pr, -1).Inc()
		case progress.Canceled:
			o.counter(&c.cancels[op][pr], o.cancels, t, op, pr, -1).Inc()
		}
		o.stage(stEndToEnd, t, op, pr, ev)
	}
}

// stage observes ev's time since the stage it is timed from, when the
// engine gave one.
func (o *Observer) stage(st, t, op, pr int, ev observe.Event) {
	if ev.Since == 0 || ev.At < ev.Since {
		return
	}
	h := o.cells[t].stages[st][op][pr].Load()
	if h == nil {
		h = o.resolveStage(st, t, op, pr)
	}
	h.Observe(float64(ev.At-ev.Since) / 1e9)
}

// counter returns the cell's counter, resolving it in vec on first use
// (state s >= 0 adds the state label).
func (o *Observer) counter(cell *atomic.Pointer[counterBox], vec *prometheus.CounterVec, t, op, pr, s int) *counterBox {
	if c := cell.Load(); c != nil {
		return c
	}
	return o.resolveCounter(cell, vec, t, op, pr, s)
}

// resolveCounter is counter's slow path, once per series: it allocates.
func (o *Observer) resolveCounter(cell *atomic.Pointer[counterBox], vec *prometheus.CounterVec, t, op, pr, s int) *counterBox {
	var lvs []string
	if vec != o.queued {
		lvs = append(lvs, o.transports[t])
	}
	lvs = append(lvs, opLabels[op], prioLabels[pr])
	if s >= 0 {
		lvs = append(lvs, stateLabels[s])
	}
	c := &counterBox{vec.WithLabelValues(lvs...)}
	cell.CompareAndSwap(nil, c) // a racing resolver got the same child
	return c
}

func (o *Observer) resolveStage(st, t, op, pr int) *histBox {
	h := &histBox{o.stages.WithLabelValues(stageLabels[st], o.transports[t], opLabels[op], prioLabels[pr])}
	o.cells[t].stages[st][op][pr].CompareAndSwap(nil, h)
	return h
}

// retried counts a retry, and a failover when it changes transport.
// Retries are rare (a path failed), so their series are looked up by
// label, which allocates: causes come from the engine's small set of
// words.
func (o *Observer) retried(ev observe.Event) {
	from, to := o.transports[o.transport(ev.From)], o.transports[o.transport(ev.Transport)]
	cause := ev.Cause
	if cause == "" || len(cause) > 32 || strings.ContainsAny(cause, " \t\n") {
		cause = "unknown"
	}
	o.retries.WithLabelValues(from, cause).Inc()
	if from != to {
		o.failovers.WithLabelValues(from, to, cause).Inc()
	}
}
