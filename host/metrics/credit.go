package metrics

import "github.com/prometheus/client_golang/prometheus"

// Credit is the engine's receiver credit as a sender, summed over its
// receivers (no peer labels).
type Credit struct {
	Receivers                      int    // receivers credit is kept at
	WindowBytes, InUseBytes        uint64 // granted now; taken and not given back
	Grants, Refused, Waits, Resets uint64
}

// CreditSource is a Source that also reports receiver credit; the
// collector exports it only when the source implements it and reports
// ok (credit on).
type CreditSource interface {
	Credit() (c Credit, ok bool)
}

type creditDescs struct {
	receivers, window, inUse, grants, refused, waits, resets *prometheus.Desc
}

func newCreditDescs(d func(name, help string, labels ...string) *prometheus.Desc) creditDescs {
	return creditDescs{
		receivers: d("credit_receivers", "Receivers this engine keeps receiver credit at (two-sided transports)."),
		window:    d("credit_window_bytes", "Bytes the receivers grant this engine in flight now, summed."),
		inUse:     d("credit_in_use_bytes", "Bytes of receiver credit taken by slices in flight and not given back, summed."),
		grants:    d("credit_grants_total", "Grants of receiver credit accepted."),
		refused:   d("credit_grants_refused_total", "Grants refused: another incarnation, a replay, or above max_bytes or max_requests."),
		waits:     d("credit_waits_total", "Slices that found no receiver credit and waited."),
		resets:    d("credit_resets_total", "Times a receiver's credit was returned: it restarted, its control service went away, or a two-sided plugin died."),
	}
}

func (c creditDescs) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.receivers, c.window, c.inUse, c.grants, c.refused, c.waits, c.resets} {
		ch <- d
	}
}

func (c creditDescs) collect(ch chan<- prometheus.Metric, src Source) {
	cs, ok := src.(CreditSource)
	if !ok {
		return
	}
	cr, ok := cs.Credit()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.receivers, prometheus.GaugeValue, float64(cr.Receivers))
	ch <- prometheus.MustNewConstMetric(c.window, prometheus.GaugeValue, float64(cr.WindowBytes))
	ch <- prometheus.MustNewConstMetric(c.inUse, prometheus.GaugeValue, float64(cr.InUseBytes))
	ch <- prometheus.MustNewConstMetric(c.grants, prometheus.CounterValue, float64(cr.Grants))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(cr.Refused))
	ch <- prometheus.MustNewConstMetric(c.waits, prometheus.CounterValue, float64(cr.Waits))
	ch <- prometheus.MustNewConstMetric(c.resets, prometheus.CounterValue, float64(cr.Resets))
}
