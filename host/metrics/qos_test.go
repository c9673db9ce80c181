package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestQoSCollector(t *testing.T) {
	q := QoS{Held: 3, HeldTotal: 10, Dropped: 1, Bandwidth: 5e8, Tenants: []QoSTenant{
		{Name: "a", Admitted: 7, Rejected: 2, Bytes: 4096, Queued: 3},
		{Name: "default", Admitted: 1, Bytes: 10},
	}}
	c := NewQoSCollector(func() (QoS, bool) { return q, true }, prometheus.Labels{"engine": "e"})
	want := `
# HELP ferry_qos_admitted_total Requests admitted (at once or from the queue), by tenant.
# TYPE ferry_qos_admitted_total counter
ferry_qos_admitted_total{engine="e",tenant="a"} 7
ferry_qos_admitted_total{engine="e",tenant="default"} 1
# HELP ferry_qos_queue_depth Requests the admission queue holds back now.
# TYPE ferry_qos_queue_depth gauge
ferry_qos_queue_depth{engine="e"} 3
# HELP ferry_qos_rejected_total Requests the admission queue refused (queue full, cannot meet its deadline), by tenant.
# TYPE ferry_qos_rejected_total counter
ferry_qos_rejected_total{engine="e",tenant="a"} 2
ferry_qos_rejected_total{engine="e",tenant="default"} 0
# HELP ferry_qos_bytes_total Bytes admitted, by tenant.
# TYPE ferry_qos_bytes_total counter
ferry_qos_bytes_total{engine="e",tenant="a"} 4096
ferry_qos_bytes_total{engine="e",tenant="default"} 10
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want),
		"ferry_qos_admitted_total", "ferry_qos_queue_depth", "ferry_qos_rejected_total", "ferry_qos_bytes_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(c); n != 4+4*2 {
		t.Errorf("%d series, want 12", n)
	}
	off := NewQoSCollector(func() (QoS, bool) { return QoS{}, false }, nil)
	if n := testutil.CollectAndCount(off); n != 0 {
		t.Errorf("without a qos block: %d series, want none", n)
	}
}
