package main

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ferrydev/ferry/cmd/ferry/internal/cpuprobe"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/internal/cpuslice"
	"github.com/ferrydev/ferry/sdk/memcpy"
)

// TestDoctorTableAligned: a detail longer than the terminal, and one with
// newlines in it (a joined error), wrap under the DETAIL column, so that
// the rows after them keep their columns; without a width only the
// newlines wrap.
func TestDoctorTableAligned(t *testing.T) {
	out := []finding{
		{Area: "plugin", Item: "tcp", Status: statusOK, Detail: strings.Repeat("a long detail that wraps ", 12), Fix: strings.Repeat("and a fix that wraps as well ", 6)},
		{Area: "config", Item: "engine.hcl", Status: statusFail, Detail: "first error\nengine.hcl:3:1: second error\nthird"},
		{Area: "kernel", Item: "ptrace scope", Status: statusOK, Detail: "short"},
	}
	for _, width := range []int{100, 0} {
		var b strings.Builder
		if err := writeFindings(&b, out, width); err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
		detail := strings.Index(lines[0], "DETAIL")
		status := strings.Index(lines[0], "STATUS")
		rows := 0
		for _, l := range lines[1:] {
			if width > 0 && utf8.RuneCountInString(l) > width {
				t.Errorf("width %d: line of %d runes: %q", width, utf8.RuneCountInString(l), l)
			}
			if strings.TrimSpace(l[:detail]) == "" { // a continuation: indented to DETAIL
				if l[detail] == ' ' && !strings.HasPrefix(l[detail:], "   ") {
					t.Errorf("width %d: continuation %q does not start at the DETAIL column %d", width, l, detail)
				}
				continue
			}
			rows++
			if l[status-1] != ' ' || l[status] == ' ' || l[detail-1] != ' ' || l[detail] == ' ' {
				t.Errorf("width %d: row %q: its STATUS and DETAIL do not start under the header's (%d, %d):\n%s", width, l, status, detail, b.String())
			}
		}
		if rows != 3 {
			t.Errorf("width %d: %d rows, want 3:\n%s", width, rows, b.String())
		}
		if !strings.Contains(b.String(), "\n"+strings.Repeat(" ", detail)+"engine.hcl:3:1: second error\n") {
			t.Errorf("width %d: the second line of a detail is not under DETAIL:\n%s", width, b.String())
		}
	}
}

// TestPeerReach: against a peer on another machine, shm (same machine
// only) is not tried and says why, tcp (open to the peer) is tried, a
// transport the peer does not run and one not running here are not, and
// one both run that did not open is a failure; on the same machine shm
// would be tried.
func TestPeerReach(t *testing.T) {
	st := host.EngineStatus{MachineID: "aaaaaaaaaaaaaaaaaaaa", Plugins: []host.PluginStatus{
		{Name: "tcp", State: "running"}, {Name: "shm", State: "running"}, {Name: "nvlink", State: "unavailable"},
		{Name: "efa", State: "running"}, {Name: "fault", State: "running"},
	}}
	seg := host.Segment{Name: "host-a", MachineID: "bbbbbbbbbbbbbbbbbbbb", Transports: []string{"tcp"},
		Rails: map[string][]segment.RailInfo{"tcp": {{Name: "10.0.0.1:0"}}, "shm": {{Name: "shm"}}, "nvlink": {{Name: "sim"}}, "fault": {{Name: "f"}}}}
	reports := map[string]pluginReport{"shm": {SameMachineOnly: true}, "nvlink": {SameMachineOnly: true}}
	got := map[string]transportReach{}
	for _, r := range peerReach(st, seg, reports) {
		got[r.name] = r
	}
	for name, want := range map[string]struct{ status, says string }{
		"tcp":    {"", ""},
		"shm":    {statusInfo, "reaches only engines on this machine"},
		"nvlink": {statusInfo, "unavailable here"},
		"efa":    {statusInfo, "host-a does not run efa"},
		"fault":  {statusFail, "could not open host-a"},
	} {
		r := got[name]
		if (want.says == "") != (r.skip == "") || !strings.Contains(r.skip, want.says) || (want.status != "" && r.status != want.status) {
			t.Errorf("%s: %+v; want status %q saying %q", name, r, want.status, want.says)
		}
	}
	seg.MachineID, seg.Transports = st.MachineID, []string{"tcp", "shm"}
	for _, r := range peerReach(st, seg, reports) {
		if r.name == "shm" && r.skip != "" {
			t.Errorf("shm to a peer on this machine: %+v, want it tried", r)
		}
	}
}

// TestCoreFinding: what doctor says of the measured round trips between
// CPUs: one CPU is a warning with a fix; near pairs are information
// alone; far ones, all or some, come with what they cost and a fix; a
// failed measurement says why.
func TestCoreFinding(t *testing.T) {
	near := cpuprobe.Pair{A: 0, B: 1, RTT: 200 * time.Nanosecond}
	far := cpuprobe.Pair{A: 0, B: 2, RTT: 950 * time.Nanosecond}
	for _, c := range []struct {
		name          string
		pairs         []cpuprobe.Pair
		ncpu          int
		err           error
		status        string
		detail, nofix string // detail holds this; nofix: the fix must be empty
		fix           string
	}{
		{name: "one CPU", ncpu: 1, status: statusWarn, detail: "one CPU", fix: "at least two CPUs"},
		{name: "near", pairs: []cpuprobe.Pair{near}, ncpu: 2, status: statusInfo, detail: "CPU 0 to CPU 1 and back: 200 ns", nofix: "near"},
		{name: "far", pairs: []cpuprobe.Pair{{A: 0, B: 1, RTT: 950 * time.Nanosecond}}, ncpu: 2, status: statusInfo, detail: "950 ns: a small request", fix: "ask for vCPUs that share a cache"},
		{name: "some far", pairs: []cpuprobe.Pair{near, far}, ncpu: 3, status: statusInfo, detail: "2 others and back: 200 ns (CPU 1) to 950 ns (CPU 2)", fix: "run the engine on CPUs that share a cache"},
		{name: "failed", ncpu: 2, err: errors.New("cpuprobe: no answer"), status: statusInfo, detail: "not measured: cpuprobe: no answer", nofix: "failed"},
	} {
		f := coreFinding(c.pairs, c.ncpu, c.err)
		if f.Status != c.status || !strings.Contains(f.Detail, c.detail) {
			t.Errorf("%s: %s %q; want %s containing %q", c.name, f.Status, f.Detail, c.status, c.detail)
		}
		if c.nofix != "" && f.Fix != "" || c.fix != "" && !strings.Contains(f.Fix, c.fix) {
			t.Errorf("%s: fix %q; want %q", c.name, f.Fix, c.fix)
		}
	}
}

// TestCopyFinding: doctor says which copy the shm plugin's bytes take
// on this machine, with its bounds.
func TestCopyFinding(t *testing.T) {
	for _, c := range []struct {
		name   string
		r      memcpy.Routine
		detail string
	}{
		{"rep", memcpy.Routine{CachedMax: 16 << 20, Rep: true, RepFrom: 32 << 10}, "copies of 32 KiB to 16.0 MiB with REP MOVSB"},
		{"pieces", memcpy.Routine{CachedMax: 16 << 20, RepFrom: 32 << 10}, "copies up to 16.0 MiB in cached pieces under 1 MiB, larger ones with non-temporal stores; no REP MOVSB"},
		{"copy", memcpy.Routine{}, "Go's copy"},
	} {
		if f := copyFinding(c.r); f.Status != statusInfo || !strings.Contains(f.Detail, c.detail) {
			t.Errorf("%s: %s %q; want info containing %q", c.name, f.Status, f.Detail, c.detail)
		}
	}
	if got := memcpy.Current(); got.CachedMax > 0 && got.RepFrom == 0 {
		t.Errorf("memcpy.Current() = %+v: a cached bound with no REP threshold", got)
	}
}

// TestSliceFinding: doctor says whether the kernel takes the engine's
// time slice, and what an older one costs; the probe leaves doctor's
// threads as they were.
func TestSliceFinding(t *testing.T) {
	for _, c := range []struct {
		name   string
		probe  error
		status string
		detail string
	}{
		{"taken", nil, statusOK, "an engine asks 100 µs"},
		{"old kernel", fmt.Errorf("cpuslice: %w", cpuslice.ErrUnsupported), statusInfo, "Linux 6.12 and later do"},
		{"refused", errors.New("thread 7: sched_setattr: operation not permitted"), statusInfo, "not measured: thread 7"},
	} {
		if f := sliceFinding(c.probe); f.Status != c.status || !strings.Contains(f.Detail, c.detail) {
			t.Errorf("%s: %s %q; want %s containing %q", c.name, f.Status, f.Detail, c.status, c.detail)
		}
	}
	before, err := cpuslice.Current()
	if err != nil {
		t.Fatal(err)
	}
	if err := probeSlice(); err != nil && !errors.Is(err, cpuslice.ErrUnsupported) {
		t.Fatal(err)
	}
	if after, _ := cpuslice.Current(); after != before || cpuslice.Held() != 0 {
		t.Fatalf("after the probe the slice reads %v (held %v), want %v as before", after, cpuslice.Held(), before)
	}
}
