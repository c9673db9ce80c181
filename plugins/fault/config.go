package fault

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
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
)

// maxExtra bounds an overreport fault's extra bytes.
const maxExtra = 1 << 40

// ExitCode is the status the process exits with on a crash fault.
const ExitCode = 3

// maxDelay bounds a delay fault: a longer one is a stall.
const maxDelay = 10 * time.Minute

// Config is the plugin's `config { ... }` body; see the package comment.
type Config struct {
	Faults []Block    `hcl:"fault,block"`
	TCP    *TCPConfig `hcl:"tcp,block"`
}

// TCPConfig is the `tcp { ... }` block: the TCP transport's own
// configuration, which this plugin does not interpret.
type TCPConfig struct {
	Body hcl.Body `hcl:",remain"`
}

// Block is one `fault "KIND" { ... }` block.
type Block struct {
	Kind   string   `hcl:"kind,label"`
	After  *int64   `hcl:"after,optional"`
	Every  *int64   `hcl:"every,optional"`
	Rate   *float64 `hcl:"rate,optional"`
	Seed   *int64   `hcl:"seed,optional"`
	Status *string  `hcl:"status,optional"`
	Delay  *string  `hcl:"delay,optional"`
	Rail   *int64   `hcl:"rail,optional"`
	Bit    *int64   `hcl:"bit,optional"`
	Extra  *int64   `hcl:"extra,optional"`
	Abort  *bool    `hcl:"abort,optional"`

	DefRange   hcl.Range `hcl:",def_range"`
	AfterRange hcl.Range `hcl:"after,attr_value_range"`
	EveryRange hcl.Range `hcl:"every,attr_value_range"`
	RateRange  hcl.Range `hcl:"rate,attr_value_range"`
	StatusRng  hcl.Range `hcl:"status,attr_value_range"`
	DelayRange hcl.Range `hcl:"delay,attr_value_range"`
	RailRange  hcl.Range `hcl:"rail,attr_value_range"`
	BitRange   hcl.Range `hcl:"bit,attr_value_range"`
	ExtraRange hcl.Range `hcl:"extra,attr_value_range"`
	AbortRange hcl.Range `hcl:"abort,attr_value_range"`
}

// fault is one validated fault block.
type fault struct {
	kind   Kind
	after  uint64
	every  uint64
	rate   float64 // in (0, 1]
	seed   uint64
	status ring.Status   // drop
	delay  time.Duration // delay, hold
	// noAbort: hold only, `abort = false`: Abort leaves held descriptors
	// alone (a transport that cannot call them back).
	noAbort bool
	rail    int    // only descriptors on this rail; -1: any
	bit     uint   // flip
	extra   uint64 // overreport
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
	if i < f.after {
		return false
	}
	if (i-f.after)%f.every != 0 {
		return false
	}
	return f.rate >= 1 || unit(f.seed, i) < f.rate
}

// unit maps (seed, i) to [0, 1) with splitmix64.
func unit(seed, i uint64) float64 {
	z := seed*0x9e3779b97f4a7c15 + i + 1
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	return float64(z>>11) / (1 << 53)
}

// parseConfig decodes the fault blocks and cuts the tcp block's body out
// of cfg.Config for the TCP transport, keeping its position in the
// operator's file.
func parseConfig(cfg sdk.StartConfig) (plan, error) {
	p := plan{tcpConfig: cfg}
	p.tcpConfig.Config = nil
	var c Config
	st := kit.Settings{Cfg: cfg, Prefix: "fault config"}
	if ok, err := st.Decode(&c); !ok {
		if err != nil {
			return plan{}, err
		}
		return p, nil
	}
	bad := st.At
	seen := map[Kind]bool{}
	for _, b := range c.Faults {
		k := Kind(b.Kind)
		switch k {
		case Crash, Stall, Drop, Corrupt, Delay, Hold, Flip, Duplicate, Overreport:
		default:
			return plan{}, bad(b.DefRange, "unknown fault %q (want drop, delay, hold, corrupt, stall, crash, flip, duplicate or overreport)", b.Kind)
		}
		if seen[k] {
			return plan{}, bad(b.DefRange, "fault %q is declared twice", b.Kind)
		}
		seen[k] = true
		f := fault{kind: k, every: 1, rate: 1, seed: 1, status: ring.StatusIO, rail: -1}
		if b.Rail != nil {
			if *b.Rail < 0 || *b.Rail >= 1<<16 {
				return plan{}, bad(b.RailRange, "fault %q: rail: %d is not a rail number (0, 1, ...)", k, *b.Rail)
			}
			f.rail = int(*b.Rail)
		}
		if b.After != nil {
			if *b.After < 0 {
				return plan{}, bad(b.AfterRange, "fault %q: after: %d is negative", k, *b.After)
			}
			f.after = uint64(*b.After)
		}
		if b.Every != nil {
			if *b.Every < 1 {
				return plan{}, bad(b.EveryRange, "fault %q: every: %d is not at least 1", k, *b.Every)
			}
			f.every = uint64(*b.Every)
		}
		if b.Rate != nil {
			if r := *b.Rate; math.IsNaN(r) || r <= 0 || r > 1 {
				return plan{}, bad(b.RateRange, "fault %q: rate: %v is outside (0, 1]", k, r)
			}
			f.rate = *b.Rate
		}
		if b.Seed != nil {
			f.seed = uint64(*b.Seed)
		}
		if b.Status != nil {
			if k != Drop {
				return plan{}, bad(b.StatusRng, "fault %q: status applies only to fault \"drop\"", k)
			}
			switch *b.Status {
			case "io":
				f.status = ring.StatusIO
			case "peer_unreachable":
				f.status = ring.StatusPeerUnreachable
			default:
				return plan{}, bad(b.StatusRng, "fault %q: status: %q is not \"io\" or \"peer_unreachable\"", k, *b.Status)
			}
		}
		timed := k == Delay || k == Hold
		switch {
		case b.Delay != nil && !timed:
			return plan{}, bad(b.DelayRange, "fault %q: delay applies only to fault \"delay\" (and \"hold\")", k)
		case b.Delay == nil && timed:
			return plan{}, bad(b.DefRange, "fault %q: needs delay = \"DURATION\"", k)
		case b.Delay != nil:
			d, err := time.ParseDuration(*b.Delay)
			if err != nil {
				return plan{}, bad(b.DelayRange, "fault %q: delay: %w", k, err)
			}
			if d <= 0 || d > maxDelay {
				return plan{}, bad(b.DelayRange, "fault %q: delay: %s is outside (0, %s]", k, d, maxDelay)
			}
			f.delay = d
		}
		if b.Abort != nil {
			if k != Hold {
				return plan{}, bad(b.AbortRange, "fault %q: abort applies only to fault \"hold\"", k)
			}
			f.noAbort = !*b.Abort
		}
		switch {
		case b.Bit != nil && k != Flip:
			return plan{}, bad(b.BitRange, "fault %q: bit applies only to fault \"flip\"", k)
		case b.Bit == nil && k == Flip:
			return plan{}, bad(b.DefRange, "fault \"flip\": needs bit = N, the token bit to flip (0..63)")
		case b.Bit != nil:
			if *b.Bit < 0 || *b.Bit > 63 {
				return plan{}, bad(b.BitRange, "fault \"flip\": bit: %d is outside 0..63", *b.Bit)
			}
			f.bit = uint(*b.Bit)
		}
		if k == Overreport {
			f.extra = 1
		}
		switch {
		case b.Extra != nil && k != Overreport:
			return plan{}, bad(b.ExtraRange, "fault %q: extra applies only to fault \"overreport\"", k)
		case b.Extra != nil:
			if *b.Extra < 1 || *b.Extra > maxExtra {
				return plan{}, bad(b.ExtraRange, "fault \"overreport\": extra: %d is outside 1..%d", *b.Extra, int64(maxExtra))
			}
			f.extra = uint64(*b.Extra)
		}
		p.faults = append(p.faults, f)
	}
	order := map[Kind]int{Crash: 0, Stall: 1, Drop: 2, Corrupt: 3, Flip: 4, Duplicate: 5, Overreport: 6, Delay: 7, Hold: 8}
	for i := 1; i < len(p.faults); i++ { // a handful of blocks: insertion sort
		for j := i; j > 0 && order[p.faults[j].kind] < order[p.faults[j-1].kind]; j-- {
			p.faults[j], p.faults[j-1] = p.faults[j-1], p.faults[j]
		}
	}
	if c.TCP != nil {
		if err := cutTCPBody(cfg, &p.tcpConfig); err != nil {
			return plan{}, err
		}
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
