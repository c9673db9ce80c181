package selector

import (
	"errors"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk"
)

var yes, no = true, false

// transports returns the usual candidates: tcp then shm, both opened and
// running, as an engine on the target's machine sees them.
func transports() []Transport {
	return []Transport{
		{Name: "tcp", MemoryKinds: []sdk.MemoryKind{sdk.MemoryCPU}, Opened: true, Running: true},
		{Name: "shm", SameMachineOnly: true, MemoryKinds: []sdk.MemoryKind{sdk.MemoryCPU}, Opened: true, Running: true},
	}
}

var names = []string{"tcp", "shm"}

var policies = []Policy{
	{Name: "kv-local", Match: Match{SameMachine: &yes, MaxSize: 1 << 20}, Transports: []string{"shm", "tcp"}},
	{Name: "ckpt", Match: Match{Intents: []string{IntentCheckpoint, IntentMigration}}, Transports: []string{"tcp"}, Rails: []string{"eth0"}},
	{Name: "big-high", Match: Match{MinSize: 64 << 20, Priorities: []string{"high"}, LocalKind: Any, RemoteKind: "cpu"}, Transports: []string{"tcp", "shm"}},
	{Name: "files", Match: Match{Segment: "file"}, Transports: []string{"tcp"}},
	{Name: "remote-only", Match: Match{SameMachine: &no}, Transports: []string{"rdma", "tcp"}},
	{Name: "pinned", Match: Match{Intents: []string{IntentWeightLoading}, MaxSize: 1}, Transports: []string{"shm"}},
}

func TestSelect(t *testing.T) {
	type mod func([]Transport)
	down := func(i int) mod { return func(c []Transport) { c[i].Running = false } }
	closed := func(i int) mod { return func(c []Transport) { c[i].Opened = false } }
	cases := []struct {
		name     string
		policies []Policy
		req      Request
		mods     []mod
		want     []string // Plan.Transports
		policy   string
		err      error
		explain  []string // substrings of Explain
	}{
		{name: "no policies, same machine prefers shm", req: Request{Size: 4096, SameMachine: true},
			want: []string{"shm", "tcp"}, explain: []string{"no policies are configured", "shm: taken (same machine", "tcp: usable, a later attempt"}},
		{name: "no policies, other machine: configured order", req: Request{Size: 4096},
			mods: []mod{closed(1)}, want: []string{"tcp"}, explain: []string{"tcp: taken (in configured order)", "shm: considered, skipped: same machine only"}},
		{name: "no policies, tcp down", req: Request{Size: 4096, SameMachine: true}, mods: []mod{down(0)}, want: []string{"shm"}},
		{name: "no policies, nothing usable", req: Request{Size: 4096}, mods: []mod{down(0)}, err: ErrNoTransport},
		{name: "first match wins", policies: policies, req: Request{Size: 4096, SameMachine: true, Intent: IntentCheckpoint},
			want: []string{"shm", "tcp"}, policy: "kv-local", explain: []string{`policy "kv-local" matched (same_machine = true, size <= 1MiB)`, "shm: taken (in the policy's order)"}},
		{name: "size range excludes the first", policies: policies, req: Request{Size: 2 << 20, SameMachine: true, Intent: IntentCheckpoint},
			want: []string{"tcp"}, policy: "ckpt", explain: []string{`policy "ckpt" matched (intent in [checkpoint, migration])`, "shm: considered, skipped: not in the policy", "rails allowed: eth0"}},
		{name: "intent list", policies: policies, req: Request{Size: 2 << 20, SameMachine: true, Intent: IntentMigration}, want: []string{"tcp"}, policy: "ckpt"},
		{name: "priority and size min", policies: policies, req: Request{Size: 64 << 20, SameMachine: true, Priority: PriorityHigh},
			want: []string{"tcp", "shm"}, policy: "big-high"},
		{name: "priority mismatch falls to default", policies: policies, req: Request{Size: 64 << 20, SameMachine: true, Priority: PriorityLow},
			want: []string{"shm", "tcp"}, policy: "", explain: []string{"no policy matched"}},
		{name: "remote memory kind mismatch", policies: policies, req: Request{Size: 64 << 20, SameMachine: true, Priority: PriorityHigh, RemoteKind: "cuda"},
			err: ErrNoTransport, explain: []string{"does not handle the target's memory kind"}},
		{name: "local memory kind mismatch", req: Request{Size: 1, SameMachine: true, LocalKind: "rocm"}, err: ErrNoTransport, explain: []string{"local memory kind"}},
		{name: "file segment", policies: policies, req: Request{Size: 64 << 20, Segment: File}, policy: "files", err: ErrNoTransport, explain: []string{"does not handle file segments"}},
		{name: "other machine, policy with a disabled transport", policies: policies, req: Request{Size: 64 << 20}, mods: []mod{closed(1)},
			want: []string{"tcp"}, policy: "remote-only", explain: []string{"rdma: considered, skipped: not enabled in this engine", "tcp: taken"}},
		{name: "explicit policy beats first match", policies: policies, req: Request{Size: 4096, SameMachine: true, Policy: "ckpt"},
			want: []string{"tcp"}, policy: "ckpt", explain: []string{`policy "ckpt": named by the request`}},
		{name: "explicit policy ignores its conditions", policies: policies, req: Request{Size: 4096, Policy: "files"}, mods: []mod{closed(1)}, want: []string{"tcp"}, policy: "files"},
		{name: "unknown explicit policy", policies: policies, req: Request{Size: 1, Policy: "nope"}, err: ErrUnknownPolicy},
		{name: "unknown intent", policies: policies, req: Request{Size: 1, Intent: "gossip"}, err: ErrBadRequest},
		{name: "hint pins the first attempt over the policy", policies: policies, req: Request{Size: 4096, SameMachine: true, Hint: "tcp"},
			want: []string{"tcp", "shm"}, policy: "kv-local", explain: []string{"hint: tcp", "tcp: taken (pinned by the request's transport hint)", "shm: usable, a later attempt (after the hinted transport)"}},
		{name: "hint outside the policy", policies: policies, req: Request{Size: 2 << 20, SameMachine: true, Intent: IntentCheckpoint, Hint: "shm"},
			want: []string{"shm", "tcp"}, policy: "ckpt"},
		{name: "hint unreachable: other machine", req: Request{Size: 4096, Hint: "shm"}, mods: []mod{closed(1)}, err: ErrUnreachable,
			explain: []string{"shm: considered, skipped: hinted, but same machine only"}},
		{name: "hint unreachable: not opened", req: Request{Size: 4096, SameMachine: true, Hint: "tcp"}, mods: []mod{closed(0)}, err: ErrUnreachable},
		{name: "hint unreachable: not running", req: Request{Size: 4096, SameMachine: true, Hint: "shm"}, mods: []mod{down(1)}, err: ErrUnreachable},
		{name: "hint unknown", req: Request{Size: 4096, Hint: "carrier-pigeon"}, err: ErrUnknownTransport},
		{name: "first match wins over a later policy naming the intent", policies: policies, req: Request{Size: 1, SameMachine: true, Intent: IntentWeightLoading}, mods: []mod{closed(0)},
			policy: "kv-local", want: []string{"shm"}},
		{name: "policy with nothing usable", policies: policies[5:], req: Request{Size: 1, Intent: IntentWeightLoading}, mods: []mod{closed(1)},
			policy: "pinned", err: ErrNoTransport, explain: []string{"tcp: considered, skipped: not in the policy"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.policies, names)
			if err != nil {
				t.Fatal(err)
			}
			c := transports()
			for _, m := range tc.mods {
				m(c)
			}
			p, err := s.Select(&tc.req, c)
			ex := p.Explain()
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v\n%s", err, tc.err, ex)
			}
			if p.Policy != tc.policy {
				t.Errorf("policy %q, want %q", p.Policy, tc.policy)
			}
			if tc.err == nil && strings.Join(p.Transports, ",") != strings.Join(tc.want, ",") {
				t.Errorf("transports %v, want %v\n%s", p.Transports, tc.want, ex)
			}
			for _, w := range tc.explain {
				if !strings.Contains(ex, w) && (err == nil || !strings.Contains(err.Error(), w)) {
					t.Errorf("explanation lacks %q:\n%s\nerr: %v", w, ex, err)
				}
			}
			// Route agrees with Select.
			i, _, rerr := s.Route(&tc.req, c)
			switch {
			case (rerr == nil) != (err == nil) || (err != nil && !errors.Is(rerr, tc.err)):
				t.Errorf("Route err = %v, Select err = %v", rerr, err)
			case err == nil && c[i].Name != p.Transports[0]:
				t.Errorf("Route = %s, Select = %v", c[i].Name, p.Transports)
			}
			// Every transport appears once in the explanation.
			if err == nil {
				for _, n := range names {
					if strings.Count(ex, "\n"+n+": ") != 1 {
						t.Errorf("%s appears %d times in\n%s", n, strings.Count(ex, "\n"+n+": "), ex)
					}
				}
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	cases := []struct {
		name string
		p    Policy
		want string
	}{
		{"no name", Policy{Transports: []string{"tcp"}}, "name is empty"},
		{"no transports", Policy{Name: "a"}, "lists no transports"},
		{"twice", Policy{Name: "a", Transports: []string{"tcp", "tcp"}}, "listed twice"},
		{"intent", Policy{Name: "a", Transports: []string{"tcp"}, Match: Match{Intents: []string{"gossip"}}}, `intent "gossip"`},
		{"priority", Policy{Name: "a", Transports: []string{"tcp"}, Match: Match{Priorities: []string{"urgent"}}}, `priority "urgent"`},
		{"segment", Policy{Name: "a", Transports: []string{"tcp"}, Match: Match{Segment: "disk"}}, `segment "disk"`},
		{"sizes", Policy{Name: "a", Transports: []string{"tcp"}, Match: Match{MinSize: 10, MaxSize: 1}}, "above max_size"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New([]Policy{tc.p}, names)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	ok := Policy{Name: "a", Transports: []string{"tcp"}}
	if _, err := New([]Policy{ok, ok}, names); err == nil || !strings.Contains(err.Error(), "declared twice") {
		t.Errorf("duplicate policy: %v", err)
	}
	s, _ := New(nil, names)
	if _, err := s.Select(&Request{}, transports()[:1]); !errors.Is(err, ErrBadRequest) {
		t.Errorf("short candidates: %v", err)
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0B", 1: "1B", 4096: "4KiB", 1 << 20: "1MiB", 1000: "1000B", 3 << 30: "3GiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRouteAllocatesNothing(t *testing.T) {
	s, err := New(policies, names)
	if err != nil {
		t.Fatal(err)
	}
	c := transports()
	for _, r := range []Request{
		{Size: 4096, SameMachine: true},
		{Size: 2 << 20, SameMachine: true, Intent: IntentCheckpoint},
		{Size: 4096, Hint: "tcp", Policy: "ckpt"},
		{Size: 64 << 20, Priority: PriorityLow},
	} {
		if n := testing.AllocsPerRun(100, func() { s.Route(&r, c) }); n != 0 {
			t.Errorf("Route(%+v) allocates %v times", r, n)
		}
	}
}

// benchInput is what the benchmarks route: a 2 MiB same-machine
// checkpoint request over the test's transports and policies. It turns
// on allocation reporting.
func benchInput(b *testing.B) (*Selector, []Transport, Request) {
	s, err := New(policies, names)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	return s, transports(), Request{Size: 2 << 20, SameMachine: true, Intent: IntentCheckpoint}
}

func BenchmarkRoute(b *testing.B) {
	s, c, r := benchInput(b)
	for b.Loop() {
		if _, _, err := s.Route(&r, c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSelect(b *testing.B) {
	s, c, r := benchInput(b)
	for b.Loop() {
		if _, err := s.Select(&r, c); err != nil {
			b.Fatal(err)
		}
	}
}
