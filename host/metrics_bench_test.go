package host_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferrydev/ferry/host"
)

// BenchmarkRequestPathMetrics is BenchmarkRequestPath (4 KiB writes in
// batches of 128 through the shm plugin to the engine's own segment)
// with metrics off and on, in the same run: the cost of the metrics
// meter on the data path (BenchmarkObservationPath is that cost alone,
// without plugins, which reads the same on a loaded machine). -benchmem
// must show 0 allocs/op in both.
func BenchmarkRequestPathMetrics(b *testing.B) {
	b.Run("metrics=off", func(b *testing.B) { benchRequestPath(b, nil) })
	b.Run("metrics=on", func(b *testing.B) { benchRequestPath(b, nil, host.WithMetricsRegistry(prometheus.NewRegistry())) })
}
