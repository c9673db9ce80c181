package metrics

import (
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

// stageLabels are the spans' stage labels, by Span.
var stageLabels = [nSpans]string{StageQueuedAdmitted, StageAdmittedSubmitted, StageSubmittedCompleted, StageEndToEnd}

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

// nBuckets is how many bounds LatencyBuckets has.
const nBuckets = 12

// LatencyBuckets are the stage histograms' bounds, in seconds: 1 µs to
// about 4 s in steps of 4, which covers a shared-memory slice and a
// multi-gigabyte transfer alike.
var LatencyBuckets = prometheus.ExponentialBuckets(1e-6, 4, nBuckets)

// Observer counts and times tasks from their stage events, into a Meter:
// it is an observe.Observer for a request path that reports events (a
// test's, or an application's own engine wrapper). The engine itself does
// not go through it: it adds to its Meter directly, which costs less
// than building and passing an event per transition.
type Observer struct {
	m          *Meter
	transports []string // index 0 is NoTransport, as the meter's
}

// NewObserver returns an observer for an engine whose plugins are
// transports, in the engine's order; its series carry constLabels.
// Register it (it is also a prometheus.Collector) to export them.
func NewObserver(transports []string, constLabels prometheus.Labels) *Observer {
	m := NewMeter(transports, constLabels)
	return &Observer{m: m, transports: m.transports}
}

// Meter returns the meter the observer counts into.
func (o *Observer) Meter() *Meter { return o.m }

// Describe and Collect make the observer a prometheus.Collector of its
// meter's series.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) { o.m.Describe(ch) }

// Collect: see Describe.
func (o *Observer) Collect(ch chan<- prometheus.Metric) { o.m.Collect(ch) }

// plugin returns the meter's plugin index of a transport name (-1 for
// none); a short scan, as an engine has a handful of plugins. A name the
// observer was not built with counts as unknown, under none.
func (o *Observer) plugin(name string) int32 {
	if name == "" {
		return -1
	}
	for i := 1; i < len(o.transports); i++ {
		if o.transports[i] == name {
			return int32(i - 1)
		}
	}
	o.m.unknown.Inc()
	return -1
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

// Observe counts and times one event. It allocates nothing (but for a
// Retried's first series) and takes no lock.
func (o *Observer) Observe(ev observe.Event) {
	switch ev.Stage {
	case observe.Queued:
		o.m.Queued(ev.Op, ev.Priority)
	case observe.Admitted:
		o.stage(SpanQueuedAdmitted, -1, ev)
	case observe.Submitted:
		o.stage(SpanAdmittedSubmitted, o.plugin(ev.Transport), ev)
	case observe.Completed:
		o.stage(SpanSubmittedCompleted, o.plugin(ev.Transport), ev)
	case observe.Retried:
		o.retried(ev)
	case observe.Ended:
		p := o.plugin(ev.Transport)
		o.m.Ended(p, ev.Op, ev.Priority, ev.State, ev.Length)
		o.stage(SpanEndToEnd, p, ev)
	}
}

// stage observes ev's time since the stage it is timed from, when the
// engine gave one.
func (o *Observer) stage(s Span, p int32, ev observe.Event) {
	if ev.Since == 0 || ev.At < ev.Since {
		return
	}
	o.m.Time(s, p, ev.Op, ev.Priority, ev.At-ev.Since)
}

// retried counts a retry, and a failover when it changes transport.
func (o *Observer) retried(ev observe.Event) {
	o.m.retried(o.transports[o.plugin(ev.From)+1], o.transports[o.plugin(ev.Transport)+1], ev.Cause)
}
