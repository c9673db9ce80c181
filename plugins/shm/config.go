package shm

import (
	"context"
	"runtime"

	"github.com/hashicorp/hcl/v2"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
)

// Config is the plugin's `config { ... }` block:
//
//	config {
//	  copy_workers   = 2        # goroutines that run large copies; default runtime.NumCPU()
//	  inline_max     = "1MiB"   # copies up to this size run in Submit itself
//	  split_min      = "4MiB"   # copies from this size are split over the workers
//	  revoke_timeout = "5s"     # how long UnregisterMemory waits for peers to unmap
//	  max_mapped_bytes = "64GiB" # peers' memory this plugin maps at most; default: this machine's RAM
//	  max_conns      = 1024     # connections from peer plugins served at once
//	  bulk_nice      = 10       # niceness of the threads that copy low-priority work; 0: off
//	  cluster_secret_file = "/etc/ferry/secret"  # or cluster_secret: peers prove they know it
//	}
//
// Every attribute is optional.
type Config struct {
	CopyWorkers   *int    `hcl:"copy_workers,optional"`
	InlineMax     *string `hcl:"inline_max,optional"`
	SplitMin      *string `hcl:"split_min,optional"`
	RevokeTimeout *string `hcl:"revoke_timeout,optional"`
	MaxMapped     *string `hcl:"max_mapped_bytes,optional"`
	MaxConns      *int    `hcl:"max_conns,optional"`
	BulkNice      *int    `hcl:"bulk_nice,optional"`
	Secret        *string `hcl:"cluster_secret,optional"`
	SecretFile    *string `hcl:"cluster_secret_file,optional"`

	CopyWorkersRange   hcl.Range `hcl:"copy_workers,attr_value_range"`
	InlineMaxRange     hcl.Range `hcl:"inline_max,attr_value_range"`
	SplitMinRange      hcl.Range `hcl:"split_min,attr_value_range"`
	RevokeTimeoutRange hcl.Range `hcl:"revoke_timeout,attr_value_range"`
	MaxMappedRange     hcl.Range `hcl:"max_mapped_bytes,attr_value_range"`
	MaxConnsRange      hcl.Range `hcl:"max_conns,attr_value_range"`
	BulkNiceRange      hcl.Range `hcl:"bulk_nice,attr_value_range"`
	SecretRange        hcl.Range `hcl:"cluster_secret,attr_value_range"`
	SecretFileRange    hcl.Range `hcl:"cluster_secret_file,attr_value_range"`
}

// Defaults and limits.
const (
	DefaultInlineMax     = 1 << 20
	DefaultSplitMin      = 4 << 20
	DefaultRevokeTimeout = samehost.DefaultRevokeTimeout
	MaxCopyWorkers       = 256
	DefaultMaxConns      = samehost.DefaultMaxConns
	// fallbackMaxMapped is max_mapped_bytes's default where the
	// machine's RAM cannot be read.
	fallbackMaxMapped = 64 << 30
	// minChunk is the smallest piece a split copy is cut into.
	minChunk = 1 << 20
	// maxSize bounds inline_max and split_min.
	maxSize = 1 << 40
)

type settings struct {
	workers   int
	inlineMax uint64
	splitMin  uint64
	maxMapped uint64 // bytes of peers' regions mapped at once, at most
	// bulkNice is the niceness of the threads that copy low-priority
	// descriptors (sdk.LowerThread); 0: they are copied like the rest.
	bulkNice int
	// The exchange's: revoke_timeout, max_conns, the cluster secret.
	samehost.Settings
}

func defaultSettings() settings {
	return settings{
		workers:   max(1, runtime.NumCPU()),
		inlineMax: DefaultInlineMax,
		splitMin:  DefaultSplitMin,
		maxMapped: machineRAM(),
		bulkNice:  sdk.DefaultBulkNice,
		Settings:  samehost.DefaultSettings(),
	}
}

// machineRAM is the default bound on mapped peer memory: this machine's
// RAM, since every mapped page is populated (MAP_POPULATE) and so
// allocated. A peer that offers more than that cannot be served anyway.
func machineRAM() uint64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil || si.Totalram == 0 {
		return fallbackMaxMapped
	}
	return uint64(si.Totalram) * uint64(max(si.Unit, 1))
}

func parseConfig(cfg sdk.StartConfig) (settings, error) {
	s := defaultSettings()
	s.Secret = kit.EngineSecret(cfg) // unless the block names its own (samehost.Config.Parse)
	var c Config
	st := kit.Settings{Cfg: cfg, Prefix: "shm config"}
	if ok, err := st.Decode(&c); !ok {
		return s, err
	}
	if err := st.Int("copy_workers", c.CopyWorkers, c.CopyWorkersRange, 1, MaxCopyWorkers, &s.workers); err != nil {
		return settings{}, err
	}
	if err := st.Size("inline_max", c.InlineMax, c.InlineMaxRange, maxSize, &s.inlineMax); err != nil {
		return settings{}, err
	}
	if err := st.Size("split_min", c.SplitMin, c.SplitMinRange, maxSize, &s.splitMin); err != nil {
		return settings{}, err
	}
	if c.SplitMin != nil && s.splitMin < 2*minChunk {
		return settings{}, st.Errorf("split_min", c.SplitMinRange, "%q is below 2MiB", *c.SplitMin)
	}
	if err := st.Size("max_mapped_bytes", c.MaxMapped, c.MaxMappedRange, maxSize, &s.maxMapped); err != nil {
		return settings{}, err
	}
	if c.MaxMapped != nil && s.maxMapped == 0 {
		return settings{}, st.Errorf("max_mapped_bytes", c.MaxMappedRange, "must be positive")
	}
	if err := st.Int("bulk_nice", c.BulkNice, c.BulkNiceRange, 0, sdk.MaxNice, &s.bulkNice); err != nil {
		return settings{}, err
	}
	common := samehost.Config{
		RevokeTimeout: c.RevokeTimeout, RevokeTimeoutRange: c.RevokeTimeoutRange,
		MaxConns: c.MaxConns, MaxConnsRange: c.MaxConnsRange,
		Secret: c.Secret, SecretRange: c.SecretRange,
		SecretFile: c.SecretFile, SecretFileRange: c.SecretFileRange,
	}
	if err := common.Parse(st, &s.Settings); err != nil {
		return settings{}, err
	}
	return s, nil
}

// CheckConfig decodes and checks cfg as Start does, starting nothing
// (sdk.ConfigChecker: `ferry plugins --config`).
func (t *Transport) CheckConfig(_ context.Context, cfg sdk.StartConfig) error {
	_, err := parseConfig(cfg)
	return err
}
