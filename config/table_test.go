package config

import (
	"strings"
	"testing"
	"time"
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

func checkFields[T any](t *testing.T, block string, tb *table[T], dst *T) {
	t.Helper()
	if tb.doc == "" {
		t.Errorf("block %q has no doc", block)
	}
	seen := map[string]bool{}
	for _, f := range tb.fields {
		name := block + "." + f.name
		if seen[f.name] {
			t.Errorf("%s is declared twice", name)
		}
		seen[f.name] = true
		if f.doc == "" {
			t.Errorf("%s has no doc", name)
		}
		p := f.at(dst)
		var ok bool
		switch f.typ {
		case tString, tPath, tHex:
			_, ok = p.(*string)
		case tBool:
			switch p.(type) {
			case *bool, **bool:
				ok = true
			}
		case tInt:
			switch p.(type) {
			case *int, **int:
				ok = true
			}
		case tSize:
			_, ok = p.(*int64)
		case tDuration:
			_, ok = p.(*time.Duration)
		case tStrings:
			_, ok = p.(*[]string)
		case tNumber:
			_, ok = p.(*float64)
		}
		if !ok {
			t.Errorf("%s: declared %s, lands in a %T", name, typeDoc[f.typ], p)
		}
		if f.def != nil {
			var zero T
			if !setValue(f.at(&zero), f.def) {
				t.Errorf("%s: default %#v (%T) does not fit a %T", name, f.def, f.def, p)
			}
		}
		for _, b := range []any{f.min, f.max} {
			if b == nil {
				continue
			}
			if _, ok := number(b); !ok {
				t.Errorf("%s: bound %#v is not a number", name, b)
			}
			switch f.typ {
			case tInt, tSize, tDuration, tNumber:
			default:
				t.Errorf("%s: a range on a %s", name, typeDoc[f.typ])
			}
		}
		if f.lazy && f.def == nil {
			t.Errorf("%s: lazy without a default", name)
		}
		for _, c := range f.words {
			if c.word == "" || strings.ContainsAny(c.word, "\"\n") {
				t.Errorf("%s: bad word %q", name, c.word)
			}
		}
	}
	for _, s := range tb.sub {
		checkFields(t, block+"."+s.name, s, dst)
	}
}

// TestDefaultsFromTables checks that the defaults the tables declare are
// the package's Default* constants that code outside reads.
func TestDefaultsFromTables(t *testing.T) {
	want := Transfer{SliceSize: DefaultSliceSize, RingDepth: DefaultRingDepth, Spin: DefaultSpin, SpinSmall: DefaultSpinSmall, StreamPause: DefaultStreamPause, Lanes: DefaultLanes, Attempts: DefaultAttempts,
		RetryBackoff: DefaultRetryBackoff, RetryBudget: DefaultRetryBudget, DefaultDeadline: DefaultDeadline}
	if got := defaultTransfer(); got != want {
		t.Errorf("defaultTransfer() = %+v, want %+v", got, want)
	}
	var s Supervise
	superviseTable.defaults(&s)
	if s != (Supervise{}) {
		t.Errorf("supervise defaults are lazy (WithDefaults applies them), got %+v", s)
	}
	var lazy Supervise
	for _, f := range superviseTable.fields {
		setValue(f.at(&lazy), f.def)
	}
	if lazy != (Supervise{}).WithDefaults() {
		t.Errorf("supervise table defaults %+v, WithDefaults %+v", lazy, (Supervise{}).WithDefaults())
	}
	var m Metastore
	for _, f := range metastoreTable.fields {
		if f.def != nil {
			setValue(f.at(&m), f.def)
		}
	}
	if m.TTL != (Metastore{}).LeaseTTL() || m.Prefix != (Metastore{}).KeyPrefix() || m.Kind != MetastoreEmbedded || m.Listen != DefaultMetastoreListen {
		t.Errorf("metastore table defaults %+v disagree with LeaseTTL/KeyPrefix/the embedded default", m)
	}
}
