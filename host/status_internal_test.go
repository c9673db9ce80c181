package host

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/observe"
	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/host/trace"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestStatusKeys: EngineStatus's rails, failures and traces keep the
// JSON keys of StatusFormat 2, all snake_case, so that a `ferry status`
// of either build reads the other's.
func TestStatusKeys(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		want []string
	}{
		{"rail", RailStatus{}, []string{"bytes", "errors", "ewma_gbps", "in_flight", "index", "label", "name", "nominal_gbps", "numa_node", "paused", "paused_until", "slices", "transport"}},
		{"failure", Failure{}, []string{"cause", "length", "op", "rail", "retried", "segment", "status", "time", "transport"}},
		{"trace", TaskTrace{}, []string{"batch", "done", "length", "op", "priority", "started", "steps", "steps.at_us", "steps.attempt", "steps.cause", "steps.error",
			"steps.from", "steps.reasons", "steps.slices", "steps.stage", "steps.state", "steps.status", "steps.transport", "task", "took_us"}},
	} {
		if got := jsonKeys(reflect.TypeOf(c.v), ""); !slices.Equal(got, c.want) {
			t.Errorf("%s: JSON keys %q, format %d has %q", c.name, got, StatusFormat, c.want)
		}
	}
}

// TestTaskTrace: a story's events become its steps: times in
// microseconds since Queued, the first failing status of a Completed,
// an Ended's state and the task's time end to end, a retry's cause.
func TestTaskTrace(t *testing.T) {
	at := int64(1e6)
	s := trace.Story{Events: []observe.Event{
		{Stage: observe.Queued, Batch: 2, Trace: true, At: at, Op: ring.OpWrite, Length: 4096},
		{Stage: observe.Routed, Transport: "shm", Reasons: "shm: taken"},
		{Stage: observe.Completed, Transport: "shm", Status: ring.StatusIO, At: at + 2000},
		{Stage: observe.Retried, Transport: "tcp", From: "shm", Cause: "io", Err: errors.New("boom"), Attempt: 1, At: at + 3000},
		{Stage: observe.Ended, State: progress.Completed, At: at + 5000},
	}}
	got := taskTrace(s)
	if !got.Done || got.Batch != 2 || got.Op != "write" || got.Length != 4096 || got.Took != 5 || len(got.Steps) != 5 {
		t.Fatalf("trace %+v", got)
	}
	st := got.Steps
	if st[0].Stage != "queued" || st[1].Reasons != "shm: taken" || st[1].At != 0 || st[2].At != 2 || st[2].Status == "" ||
		st[3].From != "shm" || st[3].Err != "boom" || st[4].State != "COMPLETED" {
		t.Errorf("steps %+v", st)
	}
	if open := taskTrace(trace.Story{Events: s.Events[:2]}); open.Done || open.Took != 0 {
		t.Errorf("a story without Ended: done %v, took %v", open.Done, open.Took)
	}
}

// jsonKeys lists the keys encoding/json writes for a struct of type t
// (fields of nested structs and of slices of structs under their
// field's key), sorted.
func jsonKeys(t reflect.Type, prefix string) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			out = append(out, jsonKeys(f.Type, prefix)...)
			continue
		}
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		out = append(out, prefix+name)
		ft := f.Type
		if ft.Kind() == reflect.Slice {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct && ft != reflect.TypeOf(time.Time{}) {
			out = append(out, jsonKeys(ft, prefix+name+".")...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
