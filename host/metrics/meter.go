package metrics

import (
	"fmt"
	"math"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Span is one of the stage latencies a Meter times.
type Span uint8

// The spans, as the stage label names them.
const (
	// SpanQueuedAdmitted: queued to admitted (validation and admission).
	SpanQueuedAdmitted Span = iota
	// SpanAdmittedSubmitted: admitted (or, for a later attempt, the
	// retry decision) to the attempt's submission.
	SpanAdmittedSubmitted
	// SpanSubmittedCompleted: an attempt's submission to its last slice
	// back, per attempt.
	SpanSubmittedCompleted
	// SpanEndToEnd: queued to ended.
	SpanEndToEnd
	nSpans
)

// SampleEvery is how sparsely the engine's meter times the stages of a
// request before its end: the spans queued_admitted, admitted_submitted
// and submitted_completed are observed for one task in SampleEvery of
// each batch (its index a multiple of it, so a batch of one is always
// timed) and for every retried attempt, since timing them costs the
// request path a clock read at admission and at submission that nothing
// else reads. A histogram is a distribution, which a sample keeps; its
// _count is then the sample's size. end_to_end, and every counter, is
// exact: it is timed from times the path reads anyway (a run of reaped
// completions counts its ends in a RunTally, added to the meter at the
// run's end).
const SampleEvery = 32

// Meter is the request path's counters and stage histograms: plain
// atomic integers, indexed by plugin, op and priority, that the engine
// adds to as its tasks move (no event, no interface call, no lock, no
// allocation), and that a scrape turns into Prometheus series (Meter is
// a prometheus.Collector). The engine holds one when metrics are on;
// Observer feeds one from stage events.
//
// A plugin is named by its index in the engine's plugin list, -1 for
// none (a task never routed).
type Meter struct {
	transports []string // index 0 is NoTransport, i+1 the engine's plugin i
	// queued is written by submitters only; cells mostly by completion.
	queued [2][3]atomic.Uint64
	_      [64]byte
	cells  []meterCells // by transport index

	queuedD, requestsD, bytesD, missesD, cancelsD, stagesD *prometheus.Desc

	retries   *prometheus.CounterVec
	failovers *prometheus.CounterVec
	// unknown counts what named a plugin the meter was not built with,
	// which it files under NoTransport.
	unknown prometheus.Counter
}

// meterCells are one transport's series by op and priority.
type meterCells struct {
	ended  [2][3][len(stateLabels)]atomic.Uint64
	bytes  [2][3]atomic.Uint64
	stages [nSpans][2][3]spanHist
}

// spanHist counts samples into LatencyBuckets (the last count is +Inf)
// and sums them in nanoseconds.
type spanHist struct {
	counts [len(latencyBoundsNs) + 1]atomic.Uint64
	sumNs  atomic.Uint64
}

// latencyBoundsNs are LatencyBuckets in nanoseconds.
var latencyBoundsNs = func() (b [nBuckets]int64) {
	for i, s := range LatencyBuckets {
		b[i] = int64(math.Round(s * 1e9))
	}
	return b
}()

func (h *spanHist) observe(ns int64) {
	h.counts[bucketOf(ns)].Add(1)
	h.sumNs.Add(uint64(ns))
}

// NewMeter returns a meter for an engine whose plugins are transports,
// in the engine's order; its series carry constLabels.
func NewMeter(transports []string, constLabels prometheus.Labels) *Meter {
	tpo := []string{"transport", "op", "priority"}
	desc := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, constLabels)
	}
	m := &Meter{
		transports: append([]string{NoTransport}, transports...),
		queuedD: desc("requests_queued_total",
			"Requests that took their place in a batch (before validation, admission and routing).", []string{"op", "priority"}),
		requestsD: desc("requests_total",
			"Requests that ended, by the transport of their last attempt (none: never routed) and terminal state.", append(tpo[:3:3], "state")),
		bytesD: desc("bytes_total",
			"Bytes of the requests that completed, by the transport that carried them; rate() of it is the throughput.", tpo),
		missesD: desc("deadline_misses_total",
			"Requests that ended TIMEOUT: their deadline passed before they completed.", tpo),
		cancelsD: desc("cancels_total", "Requests that ended CANCELED.", tpo),
		stagesD: desc("stage_duration_seconds",
			"Time between stages of a request: queued_admitted (validation and admission), admitted_submitted (routing and slicing; a retry's from its failure decision), submitted_completed (in the plugin, per attempt) and end_to_end (queued to ended). "+
				fmt.Sprintf("An engine samples the first three (one request in %d, and every retry); end_to_end counts every request.", SampleEvery),
			append([]string{"stage"}, tpo...)),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "retries_total", ConstLabels: constLabels,
			Help: "Attempts that failed and were tried again, on another rail, another transport or the restarted plugin, by the failed attempt's transport and cause."},
			[]string{"transport", "cause"}),
		failovers: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "failovers_total", ConstLabels: constLabels,
			Help: "Retries that moved a request to another transport, from the failed attempt's transport to the next one's, by cause."},
			[]string{"from", "to", "cause"}),
		unknown: prometheus.NewCounter(prometheus.CounterOpts{Namespace: Namespace, Name: "metrics_unknown_transport_events_total", ConstLabels: constLabels,
			Help: "Task events naming a transport the metrics were not set up with, counted under transport none; never more than 0 unless the engine and its metrics disagree."}),
	}
	m.cells = make([]meterCells, len(m.transports))
	return m
}

// cell returns the index of plugin p's cells.
func (m *Meter) cell(p int32) int {
	if p < 0 {
		return 0
	}
	if int(p)+1 < len(m.cells) {
		return int(p) + 1
	}
	m.unknown.Inc()
	return 0
}

// Queued counts a request that took its place in a batch.
func (m *Meter) Queued(op ring.Op, pr sdk.Priority) {
	m.queued[opIndex(op)][prioIndex(pr)].Add(1)
}

// Tally is one submitter's count of the requests it queued, by op and
// priority: plain integers, added to a meter at once (AddQueued), so
// that a Submit call of many requests makes one atomic add per kind, not
// one per request on a counter every submitter shares.
type Tally struct{ queued [2][3]uint32 }

// Queued counts a request in the tally.
func (t *Tally) Queued(op ring.Op, pr sdk.Priority) { t.queued[opIndex(op)][prioIndex(pr)]++ }

// AddQueued adds what t counted to the meter's queued requests and
// empties t.
func (m *Meter) AddQueued(t *Tally) {
	for o := range t.queued {
		for r, n := range t.queued[o] {
			if n != 0 {
				m.queued[o][r].Add(uint64(n))
				t.queued[o][r] = 0
			}
		}
	}
}

// Time observes one span of a request of plugin p that took ns
// nanoseconds; a negative span (a clock that was not read) is dropped.
func (m *Meter) Time(s Span, p int32, op ring.Op, pr sdk.Priority, ns int64) {
	if ns < 0 || s >= nSpans {
		return
	}
	m.cells[m.cell(p)].stages[s][opIndex(op)][prioIndex(pr)].observe(ns)
}

// Ended counts a request of length bytes that ended in state s, its last
// attempt on plugin p (its bytes when it completed; TIMEOUT is a missed
// deadline, CANCELED a cancel).
func (m *Meter) Ended(p int32, op ring.Op, pr sdk.Priority, s progress.State, length uint64) {
	k := int(s) - 1
	if k < 0 || k >= len(stateLabels) {
		return
	}
	c := &m.cells[m.cell(p)]
	o, r := opIndex(op), prioIndex(pr)
	c.ended[o][r][k].Add(1)
	if s == progress.Completed {
		c.bytes[o][r].Add(length)
	}
}

// Retried counts a retry of an attempt on plugin from, and a failover
// when the next attempt goes to another plugin, to. Retries are rare (a
// path failed), so their series are looked up by label, which
// allocates: causes come from the engine's small set of words.
func (m *Meter) Retried(from, to int32, cause string) {
	m.retried(m.transports[m.cell(from)], m.transports[m.cell(to)], cause)
}

func (m *Meter) retried(from, to, cause string) {
	if cause == "" || len(cause) > 32 || strings.ContainsAny(cause, " \t\n") {
		cause = "unknown"
	}
	m.retries.WithLabelValues(from, cause).Inc()
	if from != to {
		m.failovers.WithLabelValues(from, to, cause).Inc()
	}
}

// Describe and Collect make the meter a prometheus.Collector of its
// series. A series appears once something was counted in it.
func (m *Meter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.queuedD, m.requestsD, m.bytesD, m.missesD, m.cancelsD, m.stagesD} {
		ch <- d
	}
	m.retries.Describe(ch)
	m.failovers.Describe(ch)
	m.unknown.Describe(ch)
}

// Collect: see Describe. It reads the counters as they are, without
// stopping the data path: a scrape during traffic may see a histogram's
// sum a sample ahead of its counts.
func (m *Meter) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, lvs ...string) {
		if v > 0 {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), lvs...)
		}
	}
	for o := range m.queued {
		for r := range m.queued[o] {
			counter(m.queuedD, m.queued[o][r].Load(), opLabels[o], prioLabels[r])
		}
	}
	for t := range m.cells {
		c, tr := &m.cells[t], m.transports[t]
		for o := range 2 {
			for r := range 3 {
				for s := range stateLabels {
					counter(m.requestsD, c.ended[o][r][s].Load(), tr, opLabels[o], prioLabels[r], stateLabels[s])
				}
				if c.ended[o][r][progress.Completed-1].Load() > 0 { // a series once a request completed, as its bytes may be 0
					ch <- prometheus.MustNewConstMetric(m.bytesD, prometheus.CounterValue, float64(c.bytes[o][r].Load()), tr, opLabels[o], prioLabels[r])
				}
				counter(m.missesD, c.ended[o][r][progress.Timeout-1].Load(), tr, opLabels[o], prioLabels[r])
				counter(m.cancelsD, c.ended[o][r][progress.Canceled-1].Load(), tr, opLabels[o], prioLabels[r])
				for s := range c.stages {
					m.collectStage(ch, &c.stages[s][o][r], stageLabels[s], tr, opLabels[o], prioLabels[r])
				}
			}
		}
	}
	m.retries.Collect(ch)
	m.failovers.Collect(ch)
	m.unknown.Collect(ch)
}

func (m *Meter) collectStage(ch chan<- prometheus.Metric, h *spanHist, lvs ...string) {
	var n uint64
	buckets := map[float64]uint64{}
	for k := range latencyBoundsNs {
		n += h.counts[k].Load()
		buckets[LatencyBuckets[k]] = n
	}
	n += h.counts[nBuckets].Load()
	if n == 0 {
		return
	}
	ch <- prometheus.MustNewConstHistogram(m.stagesD, n, float64(h.sumNs.Load())/1e9, buckets, lvs...)
}
