package fault

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds, in the order they take precedence.
const (
	Crash   Kind = "crash"
	Stall   Kind = "stall"
	Drop    Kind = "drop"
	Corrupt Kind = "corrupt"
	Delay   Kind = "delay"
	// Hold keeps the descriptor `delay` before TCP carries it: a slow
	// path, whose memory is touched late.
	Hold Kind = "hold"
	// The completion-contract kinds: the descriptor runs normally and
	// its completion is told wrong.
	Flip       Kind = "flip"       // the token with bit `bit` flipped
	Duplicate  Kind = "duplicate"  // delivered twice
	Overreport Kind = "overreport" // `extra` bytes more than were carried
	// BreakRing writes an impossible tail into the plugin's completion
	// rings (the engine's side must see a corrupt ring, not spin on it)
	// and leaves the descriptor uncompleted.
	BreakRing Kind = "break_ring"
)

// maxExtra bounds an overreport fault's extra bytes.
const maxExtra = 1 << 40

// ExitCode is the status the process exits with on a crash fault.
const ExitCode = 3

// maxDelay bounds a delay fault: a longer one is a stall.
const maxDelay = 10 * time.Minute

// fault is one validated fault block.
type fault struct {
	kind       Kind
	after      int64
	every      int64
	rate       float64 // in (0, 1]
	seed       int64
	statusWord string
	status     ring.Status   // drop
	delay      time.Duration // delay, hold
	abort      bool          // as written; noAbort is its opposite
	// noAbort: hold only, `abort = false`: Abort leaves held descriptors
	// alone (a transport that cannot call them back).
	noAbort bool
	rail    int   // only descriptors on this rail; -1: any
	bit     int   // flip
	extra   int64 // overreport
}

// plan is the validated configuration.
type plan struct {
	faults    []fault // in order of precedence
	tcpConfig sdk.StartConfig
}

// chooses reports whether the fault applies to descriptor number i, sent
// on rail. It is a pure function of the configuration, i and rail, so runs
// repeat.
func (f *fault) chooses(i uint64, rail uint16) bool {
	if f.rail >= 0 && int(rail) != f.rail {
		return false
	}
	if i < uint64(f.after) {
		return false
	}
	if (i-uint64(f.after))%uint64(f.every) != 0 {
		return false
	}
	return f.rate >= 1 || unit(uint64(f.seed), i) < f.rate
}

// unit maps (seed, i) to [0, 1) with splitmix64.
func unit(seed, i uint64) float64 {
	z := seed*0x9e3779b97f4a7c15 + i + 1
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// kinds are the fault kinds, documented.
var kinds = []conf.Choice{
	{Word: string(Drop), Doc: "fail the descriptor with status"},
	{Word: string(Delay), Doc: "complete it delay late"},
	{Word: string(Hold), Doc: "keep it delay before TCP carries it"},
	{Word: string(Corrupt), Doc: "flip a byte of what it moved"},
	{Word: string(Stall), Doc: "stop completing and draining"},
	{Word: string(Crash), Doc: "exit the process"},
	{Word: string(Flip), Doc: "tell its completion with token bit bit flipped"},
	{Word: string(Duplicate), Doc: "tell its completion twice"},
	{Word: string(Overreport), Doc: "tell extra bytes more than it moved"},
	{Word: string(BreakRing), Doc: "write an impossible tail into the completion rings, and leave it uncompleted"},
}

// faultTable is one `fault "KIND" { ... }` block.
var faultTable = &conf.Table[fault]{
	Name: "fault", Label: "kind",
	Doc: "One fault, injected into the descriptors it chooses: from number after on, every every-th, each with probability rate.",
	Fields: []conf.Field[fault]{
		{Name: "after", Type: conf.Int, Default: 0, Min: 0,
			Doc: "Descriptors (counted from 0, over every rail) before the first one chosen.",
			At:  func(f *fault) any { return &f.after }},
		{Name: "every", Type: conf.Int, Default: 1, Min: 1,
			Doc: "Choose every this many descriptors from after on.",
			At:  func(f *fault) any { return &f.every }},
		{Name: "rate", Type: conf.Number, Default: 1.0, Hint: "; want (0, 1]",
			Doc: "Probability, in (0, 1], that a descriptor every picks is chosen; repeatable for a seed.",
			At:  func(f *fault) any { return &f.rate },
			Check: func(f *fault) error {
				if math.IsNaN(f.rate) || f.rate <= 0 || f.rate > 1 {
					return fmt.Errorf("%v is outside (0, 1]", f.rate)
				}
				return nil
			}},
		{Name: "seed", Type: conf.Int, Default: 1,
			Doc: "Seed of rate's choices.",
			At:  func(f *fault) any { return &f.seed }},
		{Name: "rail", Type: conf.Int, Default: -1, DefaultDoc: "any", Example: "0", Min: 0, Max: 1<<16 - 1,
			Skip: func(f *fault) bool { return f.rail == -1 },
			Doc:  "Only descriptors on this rail.",
			At:   func(f *fault) any { return &f.rail }},
		{Name: "status", Type: conf.String, Default: "io", Only: []string{string(Drop)}, Words: []conf.Choice{
			{Word: "io", Doc: "STATUS_IO"}, {Word: "peer_unreachable", Doc: "STATUS_PEER_UNREACHABLE"}},
			Doc: "The status a dropped descriptor completes with.",
			At:  func(f *fault) any { return &f.statusWord }},
		{Name: "delay", Type: conf.Duration, Example: `"5ms"`, Min: time.Nanosecond, Max: maxDelay, Only: []string{string(Delay), string(Hold)},
			Doc: "How late; required for delay and hold.",
			At:  func(f *fault) any { return &f.delay }},
		{Name: "abort", Type: conf.Bool, Default: true, Only: []string{string(Hold)},
			Doc: "false: Abort leaves held descriptors alone (a transport that cannot call them back).",
			At:  func(f *fault) any { return &f.abort }},
		{Name: "bit", Type: conf.Int, Example: "63", Min: 0, Max: 63, Only: []string{string(Flip)},
			Doc: "The token bit to flip; required for flip.",
			At:  func(f *fault) any { return &f.bit }},
		{Name: "extra", Type: conf.Int, Default: 1, Lazy: true, Min: 1, Max: maxExtra, Only: []string{string(Overreport)},
			Doc: "Bytes told beyond those moved.",
			At:  func(f *fault) any { return &f.extra }},
	},
}

// Settings declares the plugin's config body (see the package comment):
// defaults, ranges and the reference (docs/config.md).
var Settings = &conf.Table[plan]{
	Name: "fault",
	Doc:  "The fault-injecting test plugin (`plugin \"fault\" { config { ... } }`): the tcp transport with faults injected into chosen descriptors.",
	Raw:  []conf.Raw{{Name: "tcp", Doc: "The tcp plugin's own settings (its section), handed to it with their position in this file."}},
	Repeated: []conf.Nested[plan]{conf.Repeat(faultTable, kinds, faultRules, func(p *plan, _ string, f fault) {
		p.faults = append(p.faults, f)
	})},
}

// faultRules checks what a fault's kind needs and fills in what follows
// from it.
func faultRules(f *fault, label string, b conf.Block) {
	f.kind = Kind(label)
	switch {
	case (f.kind == Delay || f.kind == Hold) && !b.Has("delay"):
		b.Fail("", "needs delay = \"DURATION\"")
	case f.kind == Flip && !b.Has("bit"):
		b.Fail("", "needs bit = N, the token bit to flip (0..63)")
	}
	if f.kind == Overreport && f.extra == 0 {
		f.extra = 1
	}
	if f.statusWord == "peer_unreachable" {
		f.status = ring.StatusPeerUnreachable
	} else {
		f.status = ring.StatusIO
	}
	f.noAbort = !f.abort
}

// parseConfig decodes the fault blocks by Settings and cuts the tcp
// block's body out of cfg.Config for the TCP transport, keeping its
// position in the operator's file.
func parseConfig(cfg sdk.StartConfig) (plan, error) {
	p := plan{tcpConfig: cfg}
	p.tcpConfig.Config = nil
	if err := conf.Decode(cfg, "fault config", Settings, &p, nil); err != nil {
		return plan{}, err
	}
	order := map[Kind]int{Crash: 0, BreakRing: 1, Stall: 2, Drop: 3, Corrupt: 4, Flip: 5, Duplicate: 6, Overreport: 7, Delay: 8, Hold: 9}
	for i := 1; i < len(p.faults); i++ { // a handful of blocks: insertion sort
		for j := i; j > 0 && order[p.faults[j].kind] < order[p.faults[j-1].kind]; j-- {
			p.faults[j], p.faults[j-1] = p.faults[j-1], p.faults[j]
		}
	}
	if err := cutTCPBody(cfg, &p.tcpConfig); err != nil {
		return plan{}, err
	}
	return p, nil
}

// cutTCPBody finds the `tcp { ... }` block in cfg.Config and sets out's
// Config to the text between its braces, and the position fields to where
// that text starts in the operator's file.
func cutTCPBody(cfg sdk.StartConfig, out *sdk.StartConfig) error {
	file := cfg.ConfigFile
	if file == "" {
		file = "<plugin config>"
	}
	base := max(cfg.ConfigByte, 0)
	start := hcl.Pos{Line: max(cfg.ConfigLine, 1), Column: max(cfg.ConfigColumn, 1), Byte: base}
	f, diags := hclsyntax.ParseConfig(cfg.Config, file, start)
	if diags.HasErrors() {
		return fmt.Errorf("fault config: %w", diags)
	}
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return fmt.Errorf("fault config: unexpected body type %T", f.Body)
	}
	for _, b := range body.Blocks {
		if b.Type != "tcp" {
			continue
		}
		open, close := b.OpenBraceRange.End, b.CloseBraceRange.Start
		lo, hi := open.Byte-base, close.Byte-base
		if lo < 0 || hi < lo || hi > len(cfg.Config) {
			return fmt.Errorf("fault config: tcp block at %s: cannot locate its body", b.TypeRange)
		}
		out.Config = cfg.Config[lo:hi]
		out.ConfigFile = cfg.ConfigFile
		out.ConfigLine, out.ConfigColumn, out.ConfigByte = open.Line, open.Column, open.Byte
		return nil
	}
	return nil
}

// CheckConfig decodes and checks cfg as Start does, starting nothing
// (sdk.ConfigChecker: `ferry plugins --config`).
func (t *Transport) CheckConfig(_ context.Context, cfg sdk.StartConfig) error {
	_, err := parseConfig(cfg)
	return err
}
