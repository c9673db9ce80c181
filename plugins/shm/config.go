package shm

import (
	"context"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/ferrydev/ferry/sdk/kit/samehost"
)

// The plugin's `config { ... }` block (Settings declares it):
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

// Settings declares the plugin's config block: defaults, ranges and the
// reference (docs/config.md).
var Settings = &conf.Table[settings]{
	Name: "shm",
	Doc:  "The shm plugin (`plugin \"shm\" { config { ... } }`): engines on one machine, through shared memory.",
	Fields: append([]conf.Field[settings]{
		{Name: "copy_workers", Type: conf.Int, DefaultDoc: "the number of CPUs", Example: "2", Min: 1, Max: MaxCopyWorkers,
			Doc: "Goroutines that run large copies.",
			At:  func(s *settings) any { return &s.workers }},
		{Name: "inline_max", Type: conf.Size, Default: uint64(DefaultInlineMax), Min: int64(0), Max: int64(maxSize),
			Doc: "Copies up to this size run in Submit itself.",
			At:  func(s *settings) any { return &s.inlineMax }},
		{Name: "split_min", Type: conf.Size, Default: uint64(DefaultSplitMin), Min: int64(2 * minChunk), Max: int64(maxSize),
			Doc: "Copies from this size are split over the workers.",
			At:  func(s *settings) any { return &s.splitMin }},
		{Name: "max_mapped_bytes", Type: conf.Size, DefaultDoc: "this machine's RAM", Example: `"64GiB"`, Min: int64(1), Max: int64(maxSize),
			Doc: "Peers' memory this plugin maps at most.",
			At:  func(s *settings) any { return &s.maxMapped }},
		{Name: "bulk_nice", Type: conf.Int, Default: sdk.DefaultBulkNice, Min: 0, Max: sdk.MaxNice, Hint: " (0: off)",
			Doc: "Niceness of the threads that copy low-priority work; 0: off.",
			At:  func(s *settings) any { return &s.bulkNice }},
	}, samehost.Fields(func(s *settings) *samehost.Settings { return &s.Settings })...),
}

func parseConfig(cfg sdk.StartConfig) (settings, error) {
	s := defaultSettings()
	s.Secret = kit.EngineSecret(cfg) // unless the block names its own
	if err := conf.Decode(cfg, "shm config", Settings, &s, func(_ *settings, b conf.Block) { samehost.Rule(b) }); err != nil {
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
