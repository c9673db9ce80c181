package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// creditSource is a fakeSource that reports receiver credit.
type creditSource struct {
	fakeSource
	on bool
}

func (c *creditSource) Credit() (Credit, bool) {
	return Credit{Receivers: 2, WindowBytes: 3 << 20, InUseBytes: 1 << 20, Grants: 5, Refused: 1, Waits: 7, Resets: 2}, c.on
}

func TestCollectorCredit(t *testing.T) {
	c := NewCollector(&creditSource{on: true}, time.Second, prometheus.Labels{"engine": "a"})
	defer c.Close()
	want := `
# HELP ferry_credit_in_use_bytes Bytes of receiver credit taken by slices in flight and not given back, summed.
# TYPE ferry_credit_in_use_bytes gauge
ferry_credit_in_use_bytes{engine="a"} 1.048576e+06
# HELP ferry_credit_waits_total Slices that found no receiver credit and waited.
# TYPE ferry_credit_waits_total counter
ferry_credit_waits_total{engine="a"} 7
# HELP ferry_credit_grants_refused_total Grants refused: another incarnation, a replay, or above max_bytes or max_requests.
# TYPE ferry_credit_grants_refused_total counter
ferry_credit_grants_refused_total{engine="a"} 1
`
	names := []string{"ferry_credit_in_use_bytes", "ferry_credit_waits_total", "ferry_credit_grants_refused_total"}
	if err := testutil.CollectAndCompare(c, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}
	// Off (or a source without credit): no credit series.
	off := NewCollector(&creditSource{on: false}, time.Second, nil)
	defer off.Close()
	if n := testutil.CollectAndCount(off, "ferry_credit_waits_total"); n != 0 {
		t.Errorf("credit off: %d credit series; want none", n)
	}
	plain := NewCollector(&fakeSource{}, time.Second, nil)
	defer plain.Close()
	if n := testutil.CollectAndCount(plain, "ferry_credit_waits_total"); n != 0 {
		t.Errorf("a source without credit: %d credit series", n)
	}
}
