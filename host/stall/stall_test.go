package stall

import (
	"fmt"
	"reflect"
	"testing"
	"time"
)

var cfg = Config{After: 5 * time.Second, ProbeTimeout: time.Second}

// step is one look of the supervisor on a simulated clock: at is the time
// since the start, control (when set) the answer of the control call
// delivered just before, want what the detector must decide.
type step struct {
	at      time.Duration
	control *bool
	lanes   []Lane
	want    Decision
}

var (
	yes = new(true)
	no  = new(false)
)

// busy is a lane holding n descriptors that completed c so far, with
// probes sent and answered up to sent and ack.
func busy(n int64, c, sent, ack uint64) Lane {
	return Lane{InFlight: n, Completed: c, ProbeSent: sent, ProbeAck: ack}
}

func one(l Lane) []Lane { return []Lane{l} }

func probe(lane int, seq uint64) Decision {
	return Decision{Probes: []Probe{{Lane: lane, Seq: seq}}, CheckControl: true}
}

func stalled(lane int, idle time.Duration, n int64, nop, control bool, waited time.Duration) Decision {
	return Decision{Stalled: &Verdict{Lane: lane, Idle: idle, Outstanding: n, NOP: nop, Control: control, Waited: waited}}
}

const s = time.Second
const ms = time.Millisecond

func TestDetector(t *testing.T) {
	cases := []struct {
		name  string
		steps []step
	}{
		{"idle lanes are never probed", []step{
			{at: 0, lanes: one(busy(0, 0, 0, 0))},
			{at: 100 * s, lanes: one(busy(0, 0, 0, 0))},
		}},
		{"completions keep a busy lane unsuspected", []step{
			{at: 0, lanes: one(busy(8, 0, 0, 0))},
			{at: 4 * s, lanes: one(busy(8, 1, 0, 0))},
			{at: 8 * s, lanes: one(busy(8, 2, 0, 0))},
			{at: 12 * s, lanes: one(busy(8, 3, 0, 0))},
		}},
		{"the clock starts when work arrives, not at the last completion", []step{
			{at: 0, lanes: one(busy(0, 5, 0, 0))},
			{at: 100 * s, lanes: one(busy(2, 5, 0, 0))},
			{at: 104 * s, lanes: one(busy(2, 5, 0, 0))},
			{at: 105 * s, lanes: one(busy(2, 5, 0, 0)), want: probe(0, 1)},
		}},
		{"stuck lane, NOP unanswered, control answered: stalled", []step{
			{at: 0, lanes: one(busy(3, 0, 0, 0))},
			{at: 4900 * ms, lanes: one(busy(3, 0, 0, 0))},
			{at: 5 * s, lanes: one(busy(3, 0, 0, 0)), want: probe(0, 1)},
			{at: 5200 * ms, control: yes, lanes: one(busy(3, 0, 1, 0))},
			{at: 5900 * ms, lanes: one(busy(3, 0, 1, 0))},
			{at: 6 * s, lanes: one(busy(3, 0, 1, 0)), want: stalled(0, 6*s, 3, true, false, s)},
		}},
		{"NOP answered, control silent: stalled", []step{
			{at: 0, lanes: one(busy(3, 0, 0, 0))},
			{at: 5 * s, lanes: one(busy(3, 0, 0, 0)), want: probe(0, 1)},
			{at: 5100 * ms, lanes: one(busy(3, 0, 1, 1))},
			{at: 6 * s, control: no, lanes: one(busy(3, 0, 1, 1)), want: stalled(0, 6*s, 3, false, true, s)},
		}},
		{"nothing answered: both named", []step{
			{at: 0, lanes: one(busy(1, 0, 0, 0))},
			{at: 5 * s, lanes: one(busy(1, 0, 0, 0)), want: probe(0, 1)},
			{at: 6 * s, lanes: one(busy(1, 0, 1, 0)), want: stalled(0, 6*s, 1, true, true, s)},
		}},
		{"slow but alive: probed again only after another quiet period", []step{
			{at: 0, lanes: one(busy(3, 0, 0, 0))},
			{at: 5 * s, lanes: one(busy(3, 0, 0, 0)), want: probe(0, 1)},
			{at: 5200 * ms, control: yes, lanes: one(busy(3, 0, 1, 1))},
			{at: 6 * s, lanes: one(busy(3, 0, 1, 1))},
			{at: 10 * s, lanes: one(busy(3, 0, 1, 1))},
			{at: 10200 * ms, lanes: one(busy(3, 0, 1, 1)), want: probe(0, 2)},
			{at: 10300 * ms, control: yes, lanes: one(busy(3, 0, 2, 2))},
		}},
		{"a completion during the probe ends it, answered or not", []step{
			{at: 0, lanes: one(busy(3, 0, 0, 0))},
			{at: 5 * s, lanes: one(busy(3, 0, 0, 0)), want: probe(0, 1)},
			{at: 5500 * ms, control: no, lanes: one(busy(2, 1, 1, 0))},
			{at: 7 * s, lanes: one(busy(2, 1, 1, 0))},
			{at: 10 * s, lanes: one(busy(2, 1, 1, 0))},
			{at: 10500 * ms, lanes: one(busy(2, 1, 1, 0)), want: probe(0, 2)},
		}},
		{"a NOP that cannot be put on the ring is asked for again, and counts as unanswered", []step{
			{at: 0, lanes: one(busy(4096, 0, 0, 0))},
			{at: 5 * s, lanes: one(busy(4096, 0, 0, 0)), want: probe(0, 1)},
			{at: 5500 * ms, control: yes, lanes: one(busy(4096, 0, 0, 0)), want: Decision{Probes: []Probe{{0, 1}}}},
			{at: 6 * s, lanes: one(busy(4096, 0, 0, 0)), want: stalled(0, 6*s, 4096, true, false, s)},
		}},
		{"only the stuck lane is probed and named", []step{
			{at: 0, lanes: []Lane{busy(0, 0, 0, 0), busy(7, 0, 0, 0)}},
			{at: 5 * s, lanes: []Lane{busy(0, 9, 0, 0), busy(7, 0, 0, 0)}, want: probe(1, 1)},
			{at: 6 * s, control: yes, lanes: []Lane{busy(1, 9, 0, 0), busy(7, 0, 1, 0)}, want: stalled(1, 6*s, 7, true, false, s)},
		}},
		{"a late control answer after the timeout does not save it", []step{
			{at: 0, lanes: one(busy(1, 0, 0, 0))},
			{at: 5 * s, lanes: one(busy(1, 0, 0, 0)), want: probe(0, 1)},
			{at: 6 * s, lanes: one(busy(1, 0, 1, 1)), want: stalled(0, 6*s, 1, false, true, s)},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Unix(1_000_000, 0)
			d := New(cfg, len(c.steps[0].lanes))
			for k, st := range c.steps {
				if st.control != nil {
					d.ControlAnswered(*st.control)
				}
				got := d.Observe(start.Add(st.at), st.lanes)
				if !reflect.DeepEqual(got, st.want) {
					t.Fatalf("step %d at %v: got %s, want %s", k, st.at, show(got), show(st.want))
				}
			}
		})
	}
}

func show(d Decision) string {
	v := "nil"
	if d.Stalled != nil {
		v = d.Stalled.String()
	}
	return fmt.Sprintf("{probes %v control %v stalled %s}", d.Probes, d.CheckControl, v)
}

func TestVerdictString(t *testing.T) {
	cases := []struct {
		v    Verdict
		want string
	}{
		{Verdict{Lane: 0, Idle: 6040 * ms, Outstanding: 20, NOP: true, Waited: s},
			"stalled: no completion for 6s with 20 descriptors outstanding; liveness probe unanswered (NOP on lane 0, for 1s)"},
		{Verdict{Lane: 2, Idle: 7500 * ms, Outstanding: 1, NOP: true, Control: true, Waited: 1200 * ms},
			"stalled: no completion for 7.5s with 1 descriptors outstanding; liveness probe unanswered (NOP on lane 2 and control call, for 1.2s)"},
		{Verdict{Lane: 1, Idle: 5 * s, Outstanding: 3, Control: true, Waited: s},
			"stalled: no completion for 5s with 3 descriptors outstanding; liveness probe unanswered (control call, for 1s)"},
	}
	for _, c := range cases {
		if got := c.v.String(); got != c.want {
			t.Errorf("got  %q\nwant %q", got, c.want)
		}
	}
}
