package metrics

import "github.com/prometheus/client_golang/prometheus"

// QoS is what the admission queue of an engine's qos block reports, read
// on every scrape: the queue keeps these counters itself, so the request
// path does nothing for them.
type QoS struct {
	// Held is the requests held back now; HeldTotal those held back
	// since the engine started; Dropped those that ended while held.
	Held               int
	HeldTotal, Dropped uint64
	// Bandwidth is the queue's measured bandwidth, bytes per second.
	Bandwidth float64
	Tenants   []QoSTenant
}

// QoSTenant is one tenant's counters. Tenants are configured, so their
// number is bounded.
type QoSTenant struct {
	Name                      string
	Admitted, Rejected, Bytes uint64
	Queued                    int
}

// qosCollector exports a QoS read from its source at each scrape.
type qosCollector struct {
	read                                        func() (QoS, bool)
	depth, held, dropped, bw                    *prometheus.Desc
	admitted, rejected, bytes, tenantQueueDepth *prometheus.Desc
}

// NewQoSCollector returns a collector of the QoS read returns; read's
// false (no qos block) exports nothing.
func NewQoSCollector(read func() (QoS, bool), constLabels prometheus.Labels) prometheus.Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "qos", name), help, labels, constLabels)
	}
	return &qosCollector{
		read:             read,
		depth:            d("queue_depth", "Requests the admission queue holds back now."),
		held:             d("held_total", "Requests the admission queue held back, since the engine started."),
		dropped:          d("dropped_total", "Held-back requests that ended (canceled, past their deadline) before they were dispatched."),
		bw:               d("bandwidth_bytes", "The admission queue's measured bandwidth of completions, bytes per second."),
		admitted:         d("admitted_total", "Requests admitted (at once or from the queue), by tenant.", "tenant"),
		rejected:         d("rejected_total", "Requests the admission queue refused (queue full, cannot meet its deadline), by tenant.", "tenant"),
		bytes:            d("bytes_total", "Bytes admitted, by tenant.", "tenant"),
		tenantQueueDepth: d("tenant_queue_depth", "Requests held back now, by tenant.", "tenant"),
	}
}

func (c *qosCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.depth, c.held, c.dropped, c.bw, c.admitted, c.rejected, c.bytes, c.tenantQueueDepth} {
		ch <- d
	}
}

func (c *qosCollector) Collect(ch chan<- prometheus.Metric) {
	q, ok := c.read()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.depth, prometheus.GaugeValue, float64(q.Held))
	ch <- prometheus.MustNewConstMetric(c.held, prometheus.CounterValue, float64(q.HeldTotal))
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(q.Dropped))
	ch <- prometheus.MustNewConstMetric(c.bw, prometheus.GaugeValue, q.Bandwidth)
	for _, t := range q.Tenants {
		ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.CounterValue, float64(t.Admitted), t.Name)
		ch <- prometheus.MustNewConstMetric(c.rejected, prometheus.CounterValue, float64(t.Rejected), t.Name)
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.CounterValue, float64(t.Bytes), t.Name)
		ch <- prometheus.MustNewConstMetric(c.tenantQueueDepth, prometheus.GaugeValue, float64(t.Queued), t.Name)
	}
}
