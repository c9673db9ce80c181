package shm

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
)

// Config is the plugin's `config { ... }` block:
//
//	config {
//	  copy_workers   = 2        # goroutines that run large copies; default runtime.NumCPU()
//	  inline_max     = "1MiB"   # copies up to this size run in Submit itself
//	  split_min      = "4MiB"   # copies from this size are split over the workers
//	  revoke_timeout = "5s"     # how long UnregisterMemory waits for peers to unmap
//	}
//
// Every attribute is optional.
type Config struct {
	CopyWorkers   *int    `hcl:"copy_workers,optional"`
	InlineMax     *string `hcl:"inline_max,optional"`
	SplitMin      *string `hcl:"split_min,optional"`
	RevokeTimeout *string `hcl:"revoke_timeout,optional"`

	CopyWorkersRange   hcl.Range `hcl:"copy_workers,attr_value_range"`
	InlineMaxRange     hcl.Range `hcl:"inline_max,attr_value_range"`
	SplitMinRange      hcl.Range `hcl:"split_min,attr_value_range"`
	RevokeTimeoutRange hcl.Range `hcl:"revoke_timeout,attr_value_range"`
}

// Defaults and limits.
const (
	DefaultInlineMax     = 1 << 20
	DefaultSplitMin      = 4 << 20
	DefaultRevokeTimeout = 5 * time.Second
	MaxCopyWorkers       = 256
	// minChunk is the smallest piece a split copy is cut into.
	minChunk = 1 << 20
)

type settings struct {
	workers       int
	inlineMax     uint64
	splitMin      uint64
	revokeTimeout time.Duration
}

func defaultSettings() settings {
	return settings{
		workers:       max(1, runtime.NumCPU()),
		inlineMax:     DefaultInlineMax,
		splitMin:      DefaultSplitMin,
		revokeTimeout: DefaultRevokeTimeout,
	}
}

func parseConfig(cfg sdk.StartConfig) (settings, error) {
	s := defaultSettings()
	if len(bytes.TrimSpace(cfg.Config)) == 0 {
		return s, nil
	}
	var c Config
	if err := sdk.DecodeConfig(cfg, &c); err != nil {
		return settings{}, fmt.Errorf("shm config: %w", err)
	}
	bad := func(attr string, at hcl.Range, format string, args ...any) error {
		return sdk.ConfigErrorf(cfg, at, "shm config: %s: %s", attr, fmt.Sprintf(format, args...))
	}
	if c.CopyWorkers != nil {
		if n := *c.CopyWorkers; n < 1 || n > MaxCopyWorkers {
			return settings{}, bad("copy_workers", c.CopyWorkersRange, "%d is outside 1..%d", n, MaxCopyWorkers)
		}
		s.workers = *c.CopyWorkers
	}
	if c.InlineMax != nil {
		n, err := parseSize(*c.InlineMax)
		if err != nil {
			return settings{}, bad("inline_max", c.InlineMaxRange, "%v", err)
		}
		s.inlineMax = n
	}
	if c.SplitMin != nil {
		n, err := parseSize(*c.SplitMin)
		if err != nil {
			return settings{}, bad("split_min", c.SplitMinRange, "%v", err)
		}
		if n < 2*minChunk {
			return settings{}, bad("split_min", c.SplitMinRange, "%q is below 2MiB", *c.SplitMin)
		}
		s.splitMin = n
	}
	if c.RevokeTimeout != nil {
		d, err := time.ParseDuration(*c.RevokeTimeout)
		if err != nil {
			return settings{}, bad("revoke_timeout", c.RevokeTimeoutRange, "%v", err)
		}
		if d < time.Millisecond || d > time.Hour {
			return settings{}, bad("revoke_timeout", c.RevokeTimeoutRange, "%s is outside 1ms..1h", d)
		}
		s.revokeTimeout = d
	}
	return s, nil
}

// parseSize reads "4096", "512KiB", "64MiB", "1GiB" or "64MB", "1GB".
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   uint64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
		{"B", 1},
	}
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (KiB, MiB, GiB, kB, MB, GB)", s)
	}
	if n > (1<<40)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}
