package config

import (
	"testing"

	"github.com/ferrydev/ferry/sdk/conf"
)

// TestTables checks every table for the mistakes the compiler cannot see:
// a field whose Go type does not match its declared type, a default or a
// bound of the wrong type, a setting without documentation, a name twice.
func TestTables(t *testing.T) {
	checkFields(t, "", topTable, &Config{})
	checkFields(t, "metastore", metastoreTable, &Metastore{})
	checkFields(t, "control", controlTable, &Control{})
	checkFields(t, "metrics", metricsTable, &Metrics{})
	checkFields(t, "trace", traceTable, &Trace{})
	checkFields(t, "plugin", pluginTable, &Plugin{})
	checkFields(t, "device", deviceTable, &Plugin{})
	checkFields(t, "transfer", transferTable, &Transfer{})
	checkFields(t, "staging", stagingTable, &Staging{})
	checkFields(t, "supervise", superviseTable, &Supervise{})
	checkFields(t, "policy", policyTable, &Policy{})
	checkFields(t, "rail", railTable, &RailBlock{})
	checkFields(t, "qos", qosTable, &QoS{})
	checkFields(t, "qos.class", qosClassTable, &QoSClass{})
	checkFields(t, "qos.tenant", qosTenantTable, &QoSTenant{})
	checkFields(t, "credit", creditTable, &Credit{})
	if len(blocks) != 12 {
		t.Errorf("%d blocks; this test checks 12: add the new block's table above", len(blocks))
	}
}

func checkFields[T any](t *testing.T, block string, tb *conf.Table[T], _ *T) {
	t.Helper()
	for _, p := range conf.Lint(block, tb) {
		t.Error(p)
	}
}

// TestDefaultsFromTables checks that the defaults the tables declare are
// the package's Default* constants that code outside reads.
func TestDefaultsFromTables(t *testing.T) {
	want := Transfer{SliceSize: DefaultSliceSize, RingDepth: DefaultRingDepth, Spin: DefaultSpin, SpinSmall: DefaultSpinSmall, StreamPause: DefaultStreamPause, CPUSlice: DefaultCPUSlice, Lanes: DefaultLanes, Attempts: DefaultAttempts,
		RetryBackoff: DefaultRetryBackoff, RetryBudget: DefaultRetryBudget, DefaultDeadline: DefaultDeadline}
	if got := defaultTransfer(); got != want {
		t.Errorf("defaultTransfer() = %+v, want %+v", got, want)
	}
	var s Supervise
	superviseTable.Defaults(&s)
	if s != (Supervise{}) {
		t.Errorf("supervise defaults are lazy (WithDefaults applies them), got %+v", s)
	}
	var lazy Supervise
	for _, f := range superviseTable.Fields {
		conf.SetValue(f.At(&lazy), f.Default)
	}
	if lazy != (Supervise{}).WithDefaults() {
		t.Errorf("supervise table defaults %+v, WithDefaults %+v", lazy, (Supervise{}).WithDefaults())
	}
	var m Metastore
	for _, f := range metastoreTable.Fields {
		if f.Default != nil {
			conf.SetValue(f.At(&m), f.Default)
		}
	}
	if m.TTL != (Metastore{}).LeaseTTL() || m.Prefix != (Metastore{}).KeyPrefix() || m.Kind != MetastoreEmbedded || m.Listen != DefaultMetastoreListen {
		t.Errorf("metastore table defaults %+v disagree with LeaseTTL/KeyPrefix/the embedded default", m)
	}
}
