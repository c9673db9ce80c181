package shm

import (
	"context"
	"path/filepath"
	"runtime"
	"time"

	"github.com/hashicorp/hcl/v2"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
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
	DefaultRevokeTimeout = 5 * time.Second
	MaxCopyWorkers       = 256
	DefaultMaxConns      = 1024
	// fallbackMaxMapped is max_mapped_bytes's default where the
	// machine's RAM cannot be read.
	fallbackMaxMapped = 64 << 30
	// minChunk is the smallest piece a split copy is cut into.
	minChunk = 1 << 20
	// maxSize bounds inline_max and split_min.
	maxSize = 1 << 40
)

type settings struct {
	workers       int
	inlineMax     uint64
	splitMin      uint64
	revokeTimeout time.Duration
	maxMapped     uint64 // bytes of peers' regions mapped at once, at most
	maxConns      int    // served connections at once, at most
	// bulkNice is the niceness of the threads that copy low-priority
	// descriptors (sdk.LowerThread); 0: they are copied like the rest.
	bulkNice int
	secret   []byte // the cluster secret; nil: none (same-user peers are trusted)
}

func defaultSettings() settings {
	return settings{
		workers:       max(1, runtime.NumCPU()),
		inlineMax:     DefaultInlineMax,
		splitMin:      DefaultSplitMin,
		revokeTimeout: DefaultRevokeTimeout,
		maxMapped:     machineRAM(),
		maxConns:      DefaultMaxConns,
		bulkNice:      sdk.DefaultBulkNice,
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
	s.secret = kit.EngineSecret(cfg) // unless the block names its own, below
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
	if err := st.Duration("revoke_timeout", c.RevokeTimeout, c.RevokeTimeoutRange, time.Millisecond, time.Hour, &s.revokeTimeout); err != nil {
		return settings{}, err
	}
	if err := st.Size("max_mapped_bytes", c.MaxMapped, c.MaxMappedRange, maxSize, &s.maxMapped); err != nil {
		return settings{}, err
	}
	if c.MaxMapped != nil && s.maxMapped == 0 {
		return settings{}, st.Errorf("max_mapped_bytes", c.MaxMappedRange, "must be positive")
	}
	if err := st.Int("max_conns", c.MaxConns, c.MaxConnsRange, 1, 1<<20, &s.maxConns); err != nil {
		return settings{}, err
	}
	if err := st.Int("bulk_nice", c.BulkNice, c.BulkNiceRange, 0, sdk.MaxNice, &s.bulkNice); err != nil {
		return settings{}, err
	}
	switch {
	case c.Secret != nil && c.SecretFile != nil:
		return settings{}, st.Errorf("cluster_secret", c.SecretRange,
			"cluster_secret and cluster_secret_file are both set; keep one (cluster_secret_file keeps the secret out of this file)")
	case c.Secret != nil:
		if n := len(*c.Secret); n < kit.MinSecretLen {
			return settings{}, st.Errorf("cluster_secret", c.SecretRange,
				"%d bytes is too short; use at least %d random bytes (for example the output of `openssl rand -hex 32`), the same on every engine", n, kit.MinSecretLen)
		}
		s.secret = []byte(*c.Secret)
	case c.SecretFile != nil:
		path := *c.SecretFile
		if path == "" {
			return settings{}, st.Errorf("cluster_secret_file", c.SecretFileRange, "empty path; name the file that holds the cluster secret")
		}
		if !filepath.IsAbs(path) && cfg.ConfigFile != "" {
			path = filepath.Join(filepath.Dir(cfg.ConfigFile), path)
		}
		secret, err := kit.ReadSecretFile(path, "make the file readable by the plugin, or set cluster_secret instead")
		if err != nil {
			return settings{}, st.Errorf("cluster_secret_file", c.SecretFileRange, "%w", err)
		}
		s.secret = secret
	}
	return s, nil
}

// CheckConfig decodes and checks cfg as Start does, starting nothing
// (sdk.ConfigChecker: `ferry plugins --config`).
func (t *Transport) CheckConfig(_ context.Context, cfg sdk.StartConfig) error {
	_, err := parseConfig(cfg)
	return err
}
