package soak

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// States are the terminal states a task is counted under, in report
// order.
var States = []string{"COMPLETED", "FAILED", "CANCELED", "TIMEOUT", "INVALID"}

// Sample is the initiator process at one moment.
type Sample struct {
	At         time.Duration `json:"at"` // since the start of the run
	FDs        int           `json:"fds"`
	Goroutines int           `json:"goroutines"`
	RSS        int64         `json:"rss"` // bytes
}

// Fault is one injected fault and what followed it.
type Fault struct {
	// Kind is the report's row: "kill initiator/tcp", "stop target/shm",
	// "restart-target", "restart-metastore", "slow-link", "down-link".
	Kind   string        `json:"kind"`
	Detail string        `json:"detail,omitempty"` // pid, duration, rate
	At     time.Duration `json:"at"`
	// Recovered is the time from the fault to the first COMPLETED write
	// submitted after it; negative when none came before the next fault
	// or the end.
	Recovered time.Duration `json:"recovered"`
	// Before is the initiator at the fault, After at the end of its phase
	// (the next fault, or the end of the run).
	Before Sample `json:"before"`
	After  Sample `json:"after"`
	Err    string `json:"error,omitempty"` // the fault could not be injected
}

// phase is what happened between one fault (or the start) and the next.
type phase struct {
	fault    *Fault // nil before the first fault
	tasks    int
	states   map[string]int
	older    uint64
	other    uint64
	hung     int
	verdicts []string // the first wrong word of each read that had one
	// errs counts the errors of tasks that ended FAILED or INVALID, by
	// text (at most maxErrs texts a phase).
	errs map[string]int
	// acrossUpgrade counts the tasks that ended FAILED or INVALID in
	// flight across this phase's upgrade (see Task).
	acrossUpgrade int
}

// upgrade reports whether the phase is an upgrade's.
func (p *phase) upgrade() bool {
	return p.fault != nil && strings.HasPrefix(p.fault.Kind, KindUpgrade+" ")
}

const maxErrs = 8

// Tally gathers a run's outcomes as they happen, by phase: a task counts
// for the phase it was submitted in.
type Tally struct {
	mu     sync.Mutex
	phases []*phase
}

// NewTally starts with the phase before any fault.
func NewTally() *Tally {
	return &Tally{phases: []*phase{{states: map[string]int{}}}}
}

// Phase is the current phase, to pass back with outcomes.
func (t *Tally) Phase() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.phases) - 1
}

// Task counts one task of phase ph that ended in state, now. A task that
// ended FAILED or INVALID is also counted against an upgrade when it was
// in flight across one: submitted in an upgrade's phase, or before an
// upgrade that began while it ran, and no fault of another kind began
// meanwhile (that one may have failed it). A live upgrade must fail no
// task, so each such task fails the run.
func (t *Tally) Task(ph int, state string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.phases[ph]
	p.tasks++
	p.states[state]++
	if state != "FAILED" && state != "INVALID" {
		return
	}
	var up *phase
	if p.upgrade() {
		up = p
	}
	for _, q := range t.phases[ph+1:] {
		if !q.upgrade() {
			return
		}
		if up == nil {
			up = q
		}
	}
	if up != nil {
		up.acrossUpgrade++
	}
}

// Failed records why a task of phase ph ended FAILED or INVALID.
func (t *Tally) Failed(ph int, state, msg string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.phases[ph]
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	msg = state + ": " + msg
	if p.errs == nil {
		p.errs = map[string]int{}
	}
	if _, ok := p.errs[msg]; ok || len(p.errs) < maxErrs {
		p.errs[msg]++
	}
}

// Read counts what a COMPLETED read of phase ph showed.
func (t *Tally) Read(ph int, v Verdict) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.phases[ph]
	p.older += v.Older
	p.other += v.Other
	if v.First != "" && len(p.verdicts) < 20 {
		p.verdicts = append(p.verdicts, v.First)
	}
}

// Hung counts a call of phase ph that ran past its bound.
func (t *Tally) Hung(ph int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.phases[ph].hung++
}

// Completed says a write submitted at submitted (since the start) in
// phase ph COMPLETED at now: the first such after the phase's fault is
// its recovery.
func (t *Tally) Completed(ph int, submitted, now time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f := t.phases[ph].fault
	if f != nil && f.Recovered < 0 && submitted >= f.At {
		f.Recovered = now - f.At
	}
}

// Inject starts a new phase with f, sampled at injection as s; the
// phase before ends with s.
func (t *Tally) Inject(f Fault, s Sample) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if last := t.phases[len(t.phases)-1].fault; last != nil {
		last.After = s
	}
	f.Before, f.Recovered = s, -1
	t.phases = append(t.phases, &phase{fault: &f, states: map[string]int{}})
	return len(t.phases) - 1
}

// FaultFailed records why the current phase's fault was not (fully)
// injected.
func (t *Tally) FaultFailed(ph int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.phases[ph].fault; f != nil && err != nil {
		f.Err = err.Error()
	}
}

// FaultDetail adds to what the report says of phase ph's fault.
func (t *Tally) FaultDetail(ph int, detail string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.phases[ph].fault; f != nil {
		f.Detail += " " + detail
	}
}

// Row is one line of the report: the phases of one fault kind.
type Row struct {
	Kind   string         `json:"kind"`
	Faults int            `json:"faults"`
	Tasks  int            `json:"tasks"`
	States map[string]int `json:"states"`
	// Older and Other are wrong bytes read back COMPLETED: an older
	// write's (a stale write), and anything else.
	Older uint64 `json:"wrong_older"`
	Other uint64 `json:"wrong_other"`
	Hung  int    `json:"hung"`
	// AcrossUpgrade counts tasks that ended FAILED or INVALID in flight
	// across a live upgrade (Tally.Task): each fails the run.
	AcrossUpgrade int `json:"failed_across_upgrade,omitempty"`
	// RecoverMean and RecoverMax are over the faults that recovered;
	// Unrecovered counts the others.
	RecoverMean time.Duration `json:"recover_mean"`
	RecoverMax  time.Duration `json:"recover_max"`
	Unrecovered int           `json:"unrecovered"`
	// FDs, Goroutines and RSS are the mean change of the initiator over a
	// phase of this kind: at its end minus at its fault.
	FDs        float64  `json:"fd_delta"`
	Goroutines float64  `json:"goroutine_delta"`
	RSS        float64  `json:"rss_delta_bytes"`
	Wrong      []string `json:"first_wrong,omitempty"`
	// Errors counts the errors of FAILED and INVALID tasks by text.
	Errors map[string]int `json:"errors,omitempty"`
}

// Thresholds are the drift a run may show and still pass.
type Thresholds struct {
	FDs        int     `json:"fds"`        // final minus baseline
	Goroutines int     `json:"goroutines"` // final minus baseline
	RSSGrowth  float64 `json:"rss_growth"` // final over baseline, minus 1
}

// Report is a whole run.
type Report struct {
	Seed       int64         `json:"seed"`
	Duration   time.Duration `json:"duration"`
	Transports []string      `json:"transports"`
	Kinds      []string      `json:"fault_kinds"`
	Notes      []string      `json:"notes,omitempty"`
	Rows       []Row         `json:"rows"`
	Total      Row           `json:"total"`
	Faults     []Fault       `json:"faults"`
	Baseline   Sample        `json:"baseline"`
	Final      Sample        `json:"final"`
	Limits     Thresholds    `json:"thresholds"`
	// Stacks names the goroutine dumps the watchdog wrote.
	Stacks   []string `json:"stack_dumps,omitempty"`
	Failures []string `json:"failures,omitempty"`
}

// Report sums the phases by fault kind ("none" before the first fault)
// and judges the run: wrong bytes, hung calls, and drift from baseline
// to final past lim fail it.
func (t *Tally) Report(baseline, final Sample, lim Thresholds) *Report {
	t.mu.Lock()
	defer t.mu.Unlock()
	if last := t.phases[len(t.phases)-1].fault; last != nil {
		last.After = final
	}
	r := &Report{Baseline: baseline, Final: final, Limits: lim}
	rows := map[string]*Row{}
	var order []string
	type acc struct {
		recovered []time.Duration
		fd, gor   []float64
		rss       []float64
	}
	accs := map[string]*acc{}
	r.Total = Row{Kind: "total", States: map[string]int{}}
	for _, p := range t.phases {
		kind := "none"
		if p.fault != nil {
			kind = p.fault.Kind
		}
		row := rows[kind]
		if row == nil {
			row = &Row{Kind: kind, States: map[string]int{}}
			rows[kind], accs[kind] = row, &acc{}
			order = append(order, kind)
		}
		for _, into := range []*Row{row, &r.Total} {
			into.Tasks += p.tasks
			for s, n := range p.states {
				into.States[s] += n
			}
			into.Older += p.older
			into.Other += p.other
			into.Hung += p.hung
			into.AcrossUpgrade += p.acrossUpgrade
		}
		row.Wrong = append(row.Wrong, p.verdicts...)
		for msg, n := range p.errs {
			if row.Errors == nil {
				row.Errors = map[string]int{}
			}
			row.Errors[msg] += n
		}
		if f := p.fault; f != nil {
			row.Faults++
			r.Total.Faults++
			r.Faults = append(r.Faults, *f)
			a := accs[kind]
			if f.Recovered >= 0 {
				a.recovered = append(a.recovered, f.Recovered)
			} else {
				row.Unrecovered++
				r.Total.Unrecovered++
			}
			a.fd = append(a.fd, float64(f.After.FDs-f.Before.FDs))
			a.gor = append(a.gor, float64(f.After.Goroutines-f.Before.Goroutines))
			a.rss = append(a.rss, float64(f.After.RSS-f.Before.RSS))
		}
	}
	mean := func(xs []float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		var s float64
		for _, x := range xs {
			s += x
		}
		return s / float64(len(xs))
	}
	var all []time.Duration
	for _, k := range order {
		row, a := rows[k], accs[k]
		if len(a.recovered) > 0 {
			var s time.Duration
			for _, d := range a.recovered {
				s += d
			}
			row.RecoverMean, row.RecoverMax = s/time.Duration(len(a.recovered)), slices.Max(a.recovered)
			all = append(all, a.recovered...)
		}
		row.FDs, row.Goroutines, row.RSS = mean(a.fd), mean(a.gor), mean(a.rss)
		r.Rows = append(r.Rows, *row)
	}
	if len(all) > 0 {
		var s time.Duration
		for _, d := range all {
			s += d
		}
		r.Total.RecoverMean, r.Total.RecoverMax = s/time.Duration(len(all)), slices.Max(all)
	}
	r.Total.FDs = float64(final.FDs - baseline.FDs)
	r.Total.Goroutines = float64(final.Goroutines - baseline.Goroutines)
	r.Total.RSS = float64(final.RSS - baseline.RSS)
	r.judge()
	return r
}

// judge fills Failures.
func (r *Report) judge() {
	r.Failures = nil
	t := r.Total
	if t.Older > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d bytes read back COMPLETED were an older write's (stale writes)", t.Older))
	}
	if t.Other > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d bytes read back COMPLETED were wrong (not an older write's)", t.Other))
	}
	if t.Hung > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d calls hung (ran past their deadline + 10s)", t.Hung))
	}
	if t.AcrossUpgrade > 0 {
		r.Failures = append(r.Failures, fmt.Sprintf("%d tasks ended FAILED or INVALID in flight across a live upgrade", t.AcrossUpgrade))
	}
	for _, f := range r.Faults {
		if strings.HasPrefix(f.Kind, KindUpgrade+" ") && f.Err != "" {
			r.Failures = append(r.Failures, fmt.Sprintf("%s at %v did not take over: %s", f.Kind, fmtDur(f.At), f.Err))
		}
	}
	if d := r.Final.FDs - r.Baseline.FDs; d > r.Limits.FDs {
		r.Failures = append(r.Failures, fmt.Sprintf("FDs drifted by %+d (limit %d)", d, r.Limits.FDs))
	}
	if d := r.Final.Goroutines - r.Baseline.Goroutines; d > r.Limits.Goroutines {
		r.Failures = append(r.Failures, fmt.Sprintf("goroutines drifted by %+d (limit %d)", d, r.Limits.Goroutines))
	}
	if r.Baseline.RSS > 0 {
		if g := float64(r.Final.RSS)/float64(r.Baseline.RSS) - 1; g > r.Limits.RSSGrowth {
			r.Failures = append(r.Failures, fmt.Sprintf("RSS grew by %.1f%% (limit %.1f%%)", 100*g, 100*r.Limits.RSSGrowth))
		}
	}
}

// OK reports whether the run passed.
func (r *Report) OK() bool { return len(r.Failures) == 0 }

// WriteText prints the report as tables.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "ferry soak: %v, seed %d, transports %v, fault kinds %v: %d faults, %d tasks\n",
		r.Duration.Round(time.Second), r.Seed, r.Transports, r.Kinds, r.Total.Faults, r.Total.Tasks)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "FAULT\tN\tTASKS\t")
	for _, s := range States {
		fmt.Fprintf(tw, "%s\t", s)
	}
	fmt.Fprintln(tw, "OLDER B\tOTHER B\tHUNG\tRECOVER MEAN\tMAX\tΔFD\tΔGOR\tΔRSS MiB\t")
	for _, row := range append(slices.Clone(r.Rows), r.Total) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t", row.Kind, row.Faults, row.Tasks)
		for _, s := range States {
			fmt.Fprintf(tw, "%d\t", row.States[s])
		}
		rec, max := "-", "-"
		if row.RecoverMax > 0 || row.RecoverMean > 0 {
			rec, max = fmtDur(row.RecoverMean), fmtDur(row.RecoverMax)
		}
		if row.Unrecovered > 0 {
			max += fmt.Sprintf(" (%d not)", row.Unrecovered)
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%+.1f\t%+.1f\t%+.1f\t\n", row.Older, row.Other, row.Hung, rec, max,
			row.FDs, row.Goroutines, row.RSS/(1<<20))
	}
	tw.Flush()
	fmt.Fprintf(w, "(ΔFD, ΔGOR, ΔRSS: per fault kind, the mean change over a phase, from the fault to the next; total: final minus baseline)\n")
	fmt.Fprintf(w, "initiator: FDs %d -> %d, goroutines %d -> %d, RSS %.1f -> %.1f MiB (baseline at %v, final at %v)\n",
		r.Baseline.FDs, r.Final.FDs, r.Baseline.Goroutines, r.Final.Goroutines,
		float64(r.Baseline.RSS)/(1<<20), float64(r.Final.RSS)/(1<<20), r.Baseline.At.Round(time.Second), r.Final.At.Round(time.Second))
	if len(r.Faults) > 0 {
		fmt.Fprintln(w, "faults:")
		for _, f := range r.Faults {
			rec := "not recovered"
			if f.Recovered >= 0 {
				rec = "recovered in " + fmtDur(f.Recovered)
			}
			line := fmt.Sprintf("  %7s  %-20s %s; %s; FDs %+d, goroutines %+d", fmtDur(f.At), f.Kind, f.Detail, rec,
				f.After.FDs-f.Before.FDs, f.After.Goroutines-f.Before.Goroutines)
			if f.Err != "" {
				line += "; error: " + f.Err
			}
			fmt.Fprintln(w, line)
		}
	}
	for _, row := range r.Rows {
		for _, s := range row.Wrong {
			fmt.Fprintf(w, "wrong bytes after %s: %s\n", row.Kind, s)
		}
	}
	for _, row := range r.Rows {
		msgs := make([]string, 0, len(row.Errors))
		for m := range row.Errors {
			msgs = append(msgs, m)
		}
		slices.SortFunc(msgs, func(a, b string) int { return row.Errors[b] - row.Errors[a] })
		when := "after " + row.Kind
		if row.Kind == "none" {
			when = "before any fault"
		}
		for _, m := range msgs {
			fmt.Fprintf(w, "%s: %d× %s\n", when, row.Errors[m], m)
		}
	}
	for _, s := range r.Stacks {
		fmt.Fprintf(w, "goroutine stacks dumped to %s\n", s)
	}
	if r.OK() {
		fmt.Fprintln(w, "PASS: no wrong bytes, no hung calls, drift within limits")
		return
	}
	for _, f := range r.Failures {
		fmt.Fprintf(w, "FAIL: %s\n", f)
	}
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.String()
}
