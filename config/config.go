package config

import (
	"cmp"
	"os"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/internal/cpuslice"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
)

// Metastore kinds.
const (
	// MetastoreEmbedded starts an HTTP metastore inside the engine.
	MetastoreEmbedded = "embedded"
	// MetastoreHTTP uses a remote HTTP metastore (Ferry's or Mooncake's).
	MetastoreHTTP = "http"
	// MetastoreNone keeps descriptors in the engine's memory: no peer can
	// find this engine.
	MetastoreNone = "none"
	// MetastoreRedis publishes descriptors to a Redis server at address.
	MetastoreRedis = "redis"
	// MetastoreEtcd publishes descriptors to an etcd cluster at endpoints.
	MetastoreEtcd = "etcd"
)

// Defaults applied by Parse and Default.
const (
	DefaultMetastoreListen = "127.0.0.1:0"
	// DefaultControlListen is where an engine serves its control service
	// for peers when the file sets no control.listen and none of its rails
	// has a routable address (a single-host engine).
	DefaultControlListen = "127.0.0.1:0"
	// DefaultMetastoreTTL is how long a dead engine's descriptor outlives
	// it; see Metastore.TTL.
	DefaultMetastoreTTL = 5 * time.Second
	// DefaultMetastorePrefix is put before every key Ferry writes.
	DefaultMetastorePrefix = "ferry/"
	DefaultSliceSize       = 1 << 20
	DefaultRingDepth       = 4096
	// DefaultSpin is the SDK's: a lane sent no budget spins as long.
	DefaultSpin      = sdk.DefaultSpin
	DefaultSpinSmall = time.Millisecond
	// DefaultCPUSlice is the shortest slice Linux gives: see
	// Transfer.CPUSlice.
	DefaultCPUSlice = cpuslice.Min
	// MaxCPUSlice is the longest it takes.
	MaxCPUSlice = cpuslice.Max
	// DefaultStreamPause is the SDK's: the pause after a short run in a
	// stream; see Transfer.StreamPause.
	DefaultStreamPause = sdk.DefaultStreamPause
	// MaxStreamPause bounds StreamPause, as a plugin's lane does.
	MaxStreamPause = sdk.MaxStreamPause
	// SmallBatch is the most bytes a batch (or a run of descriptors a
	// plugin lane drained) holds to count as small; see SpinSmall. It is
	// the SDK's: the host and the plugin's lane must agree on it.
	SmallBatch      = sdk.SmallBatch
	DefaultLanes    = 1
	DefaultAttempts = 3
	// DefaultRetryBackoff is the pause before a task's first retry; each
	// later one doubles it, and jitter adds up to half. Two retries span
	// 150 ms at least: a short network blip.
	DefaultRetryBackoff = 50 * time.Millisecond
	// DefaultRetryBudget bounds a task's failover, from its first failure:
	// the backoffs and the waits for a restarting plugin together.
	DefaultRetryBudget = 5 * time.Second
	// DefaultDeadline is the deadline of a request that sets none.
	DefaultDeadline = 30 * time.Second
	// DefaultStallAfter is how long a plugin lane may hold work without
	// a completion before the engine probes the plugin; see Supervise.
	DefaultStallAfter = 5 * time.Second
	// DefaultProbeTimeout is how long a liveness probe may go unanswered
	// before a plugin is declared stalled and killed.
	DefaultProbeTimeout = time.Second
	// DefaultSuperviseInterval is how often the engine looks at its
	// plugins' lanes.
	DefaultSuperviseInterval = time.Second
	// DefaultContractViolations completion contract violations within
	// DefaultContractWindow make a plugin faulty: it is killed and
	// restarted. See Supervise.
	DefaultContractViolations = 10
	DefaultContractWindow     = 10 * time.Second
	// DefaultMetricsPluginTimeout bounds a scrape's wait for the
	// plugins' counters.
	DefaultMetricsPluginTimeout = time.Second
	// DefaultEndGrace is how long a plugin may hold slices of a task
	// that was canceled or timed out before it is killed; see Supervise.
	DefaultEndGrace = 5 * time.Second
	// DefaultUpgradeDrain bounds how long a live upgrade lets the old
	// run of a plugin finish its work; see Supervise.UpgradeDrain.
	DefaultUpgradeDrain = 30 * time.Second
)

// Limits that Validate enforces on the transfer block.
const (
	MinSliceSize = 4 << 10
	MaxSliceSize = 1 << 30
	MinRingDepth = 2
	MaxRingDepth = 1 << 20
	// MaxSpin bounds busy-waiting: beyond it a lane burns a core for
	// nothing, and these machines have two. It is the SDK's, which holds
	// a lane's small budget to it.
	MaxSpin  = sdk.MaxSpin
	MaxLanes = 64
	// MaxAttempts is as many attempts as a ring token tells apart.
	MaxAttempts = 16
	// Bounds of retry_backoff and retry_budget: a backoff longer than a
	// second outlasts the blips it is for; a budget beyond ten minutes
	// hides a dead peer.
	MaxRetryBackoff = time.Second
	MinRetryBudget  = 10 * time.Millisecond
	MaxRetryBudget  = 10 * time.Minute
	// MaxDefaultDeadline bounds default_deadline ("0s" turns it off).
	MaxDefaultDeadline = 24 * time.Hour
	// Bounds of metastore.ttl: shorter leases expire on a busy server's
	// hiccup, longer ones leave a dead engine's descriptor for too long.
	MinMetastoreTTL = time.Second
	MaxMetastoreTTL = time.Hour
	// Bounds of the supervise block. A stall window much shorter than
	// the slowest transfer of one slice kills plugins that are only slow
	// (they answer the probe, but every window costs a probe).
	MinStallAfter         = 100 * time.Millisecond
	MaxStallAfter         = time.Hour
	MinProbeTimeout       = time.Millisecond
	MaxProbeTimeout       = time.Minute
	MinSuperviseInterval  = 10 * time.Millisecond
	MaxSuperviseInterval  = time.Minute
	MaxContractViolations = 1 << 20
	MinContractWindow     = 10 * time.Millisecond
	MaxContractWindow     = time.Hour
	// Bounds of metrics.plugin_timeout: within a Prometheus scrape
	// timeout (10s by default), and long enough for a Stats call.
	MinMetricsPluginTimeout = 10 * time.Millisecond
	MaxMetricsPluginTimeout = 10 * time.Second
	MinEndGrace             = 10 * time.Millisecond
	MaxEndGrace             = 10 * time.Minute
	MinUpgradeDrain         = 10 * time.Millisecond
	MaxUpgradeDrain         = time.Hour
)

// Config is one engine's configuration.
type Config struct {
	// Name is the engine's segment name, as peers address it. Required.
	Name string
	// MachineID identifies the machine; engines with the same id may use
	// same-machine transports (shared memory). Parse and Default fill it
	// with DefaultMachineID when the file does not set it.
	MachineID string
	// PluginDir is where plugin binaries live. "" lets the loader decide
	// (the directory of the running ferry binary).
	PluginDir string
	// ClusterSecretFile names the file holding the cluster secret (Parse
	// makes it absolute); "" for none. With it the engine signs its
	// descriptor and refuses peers' unsigned or badly signed ones. It is
	// the same file the tcp plugin's cluster_secret_file names, which
	// plugins keep reading from their own block. Not with ClusterSecret.
	ClusterSecretFile string
	// ClusterSecret is the cluster secret itself (at least 16 bytes), for
	// a Config built in code: the same on every engine of the cluster.
	// Default sets it to the process's generated secret (GeneratedSecret)
	// unless $FERRY_CLUSTER_SECRET_FILE names a file; set it, or
	// ClusterSecretFile instead, to join engines of other processes. Not
	// with ClusterSecretFile; no file sets it.
	ClusterSecret []byte
	// Strict makes New fail when an enabled plugin cannot start or no
	// transport is usable; false runs degraded and says so. nil is true,
	// the documented default, so that a Config built field by field is
	// strict too: read it with IsStrict, set it with SetStrict.
	Strict *bool

	Metastore Metastore
	Control   Control
	// Metrics is the metrics block; Listen "" when the file has none.
	Metrics Metrics
	Trace   Trace
	Plugins []Plugin
	// Devices are the device blocks: device plugins (Plugin's fields,
	// binaries named ferry-device-<name>), started on first use.
	Devices  []Plugin
	Transfer Transfer
	// Staging is the staging block: the host memory through which
	// requests on device memory travel where no transport reaches it.
	Staging   Staging
	Supervise Supervise
	// Policies choose transports per request, in file order, first match
	// wins; see Policy.
	Policies []Policy
	// Rails name rails of the transports and state their NUMA node and
	// bandwidth; see RailBlock.
	Rails []RailBlock
	// QoS is the qos block; On false without one. See qos.go.
	QoS QoS

	// File is the path the configuration was loaded from; "" when built
	// in code.
	File string

	// loc says where each setting was written, for Validate's messages.
	// Keys are field names as in the file ("transfer.ring_depth").
	loc map[string]hcl.Range
}

// IsStrict reports whether New must refuse to start a degraded engine:
// Strict, or true when it is nil (the default).
func (c *Config) IsStrict() bool { return c.Strict == nil || *c.Strict }

// SetStrict sets Strict; SetStrict(false) lets the engine start degraded.
func (c *Config) SetStrict(on bool) { c.Strict = &on }

// Metastore says where segment descriptors are published. It is plain
// data; host/metastore.Open connects to it.
type Metastore struct {
	Kind   string // MetastoreEmbedded, MetastoreHTTP, MetastoreRedis, MetastoreEtcd or MetastoreNone
	Listen string // host:port for the embedded metastore
	URL    string // the remote metastore, like http://10.0.0.1:7070/metadata

	Address   string   // redis: host:port
	Endpoints []string // etcd: client URLs, like http://10.0.0.1:2379
	Username  string   // redis, etcd: "" for none
	Password  string   // redis, etcd
	Database  int      // redis: database number
	TLS       bool     // redis, etcd: connect with TLS
	CAFile    string   // redis, etcd: PEM file of CAs to trust; needs TLS. Parse makes it absolute.

	// TTL is how long a descriptor outlives an engine that stopped
	// refreshing it (died); 0 means DefaultMetastoreTTL. Every kind
	// honours it.
	TTL time.Duration
	// Prefix is put before every key Ferry writes; "" means
	// DefaultMetastorePrefix.
	Prefix string
}

// LeaseTTL returns TTL, or DefaultMetastoreTTL when it is 0.
func (m Metastore) LeaseTTL() time.Duration { return cmp.Or(m.TTL, DefaultMetastoreTTL) }

// KeyPrefix returns Prefix, or DefaultMetastorePrefix when it is "".
func (m Metastore) KeyPrefix() string { return cmp.Or(m.Prefix, DefaultMetastorePrefix) }

// Control is where the engine serves its host-to-host control service
// (descriptor fetch, notifications, liveness) for peers.
type Control struct {
	// Listen is a host:port, or "" for the engine to choose: the address
	// of its first routable rail (its tcp listen address) at port 0, else
	// DefaultControlListen. The descriptor publishes the address the
	// listener got; a wildcard (0.0.0.0) is published as the engine's
	// routable address.
	Listen string
}

// Metrics says where the engine serves its Prometheus metrics.
type Metrics struct {
	// Listen is the host:port of the /metrics endpoint; "" serves none.
	Listen string
	// PluginTimeout bounds how long a scrape waits for the plugins' own
	// counters; 0 means DefaultMetricsPluginTimeout.
	PluginTimeout time.Duration
}

// PluginWait returns PluginTimeout, or DefaultMetricsPluginTimeout when
// it is 0.
func (m Metrics) PluginWait() time.Duration {
	return cmp.Or(m.PluginTimeout, DefaultMetricsPluginTimeout)
}

// Plugin is one plugin block.
type Plugin struct {
	// Name is the block's label; the binary is ferry-plugin-<Name> unless
	// Path says otherwise.
	Name string
	// Path is the plugin binary; "" means <PluginDir>/ferry-plugin-<Name>.
	// Parse makes a relative path absolute against the file's directory.
	Path string
	// SHA256 is the binary's expected digest, lower-case hex, or "".
	SHA256 string
	// Enabled is false when the operator turned the plugin off.
	Enabled bool

	// Body is the source text of the plugin's config block, between the
	// braces, exactly as written; nil when there is no config block. The
	// host does not decode it; the plugin does, with sdk.DecodeConfig.
	Body []byte
	// BodyFile, BodyLine, BodyColumn and BodyByte say where Body starts
	// (the position just after the opening brace), so that
	// hclsyntax.ParseConfig(Body, BodyFile, hcl.Pos{Line: BodyLine,
	// Column: BodyColumn, Byte: BodyByte}) reports positions in the
	// operator's file.
	BodyFile   string
	BodyLine   int
	BodyColumn int
	BodyByte   int

	// DeclRange is where the block starts, like "engine.hcl:12:1", for
	// error messages.
	DeclRange string

	loc map[string]hcl.Range // keyed by attribute name
}

// Trace says which transfers' stories the engine keeps (host/trace).
type Trace struct {
	// Keep is how many finished stories are kept (and at most how many
	// tasks are traced at once); 0: no tracing, and Request.Trace does
	// nothing.
	Keep int
	// SampleEvery traces one task in SampleEvery besides those whose
	// request asks; 0: only those.
	SampleEvery int
}

// Transfer holds the data-path knobs.
type Transfer struct {
	SliceSize int64         // bytes per slice of a large request
	RingDepth int           // descriptors per ring; a power of two
	Spin      time.Duration // how long a lane spins before it sleeps
	// SpinSmall is how long a waiter spins for a small batch (at most
	// SmallBatch bytes), and a plugin lane after small descriptors: a
	// small request completes within a network round trip, and sleeping
	// through it costs more than the round trip on a loaded machine. A
	// waiter spins so only on a lane whose small batches complete in a
	// median of 500 us or less (shm's, and tcp's on idle cores), or 50 us
	// or less (shm's) while the engine's spins lose their CPU
	// (progress.Busy); on a slower one it sleeps on the completion ring
	// at once, and the plugin's wakeup lands on it (progress.Lane.WaitOn,
	// waiting.SmallSpin). A
	// plugin whose transport assists (sdk.Assister, as tcp does) lets its
	// lane sleep instead while small work is on the wire: the goroutine
	// that completes it takes the next request.
	SpinSmall time.Duration
	// StreamPause is how long a lane's consumer leaves its ring alone
	// after a short run (under 16 descriptors) that came in a stream: the
	// plugin after submissions of at most 1 KiB each, which it took while
	// the engine had not reaped its earlier completions; the engine's
	// reaper after completions. What arrives meanwhile is taken as one
	// run. A stream of one-block submissions otherwise keeps both
	// spinning and taking descriptors one at a time, which on a small
	// machine takes the cores the submitter needs. Neither pauses while
	// a caller waits on the lane (Wait, a synchronous Transfer), and the
	// plugin never pauses after a high-priority descriptor. 0: never.
	StreamPause time.Duration
	// HandoffSleeps has every sleep on a lane's rings that lasts past
	// 50 us, the engine's (its reapers', its waiters') and the plugins',
	// hand its Go scheduler slot (P) over, so that the runtime's monitor
	// thread has none to take and does not turn to waking every 20-70 us
	// (ring.Ring.SetSleepHandoff). It keeps a high-priority stream's
	// tail beside bulk transfers on a small machine; each long sleep then
	// costs a thread wakeup, which large transfers pay. false: the
	// runtime takes a sleep's P when it needs it.
	HandoffSleeps bool
	// CPUSlice is the time slice the engine asks Linux's scheduler for
	// on its process's threads (internal/cpuslice): a thread woken by a
	// completion then runs at once beside busy threads of other
	// processes rather than after their slice. 0: the process's threads
	// are left as they are.
	CPUSlice time.Duration
	Lanes    int // lanes (ring pairs) per plugin
	// Attempts is how many times a failed task is tried in all, first
	// attempt included: on another rail, another transport, or a
	// restarted plugin. 1 turns failover off.
	Attempts int
	// RetryBackoff is the pause before a task's first retry; each later
	// retry doubles it, plus a random jitter of up to half. 0: none.
	RetryBackoff time.Duration
	// RetryBudget bounds a task's failover from its first failure: its
	// backoffs and its waits for a restarting plugin. 0: the engine's
	// default (DefaultRetryBudget).
	RetryBudget time.Duration
	// DefaultDeadline is the deadline given to a request that sets none,
	// counted from its Submit; 0: such a request has none.
	DefaultDeadline time.Duration
}

// Staging is the staging block (host/staging): a bounded pool of
// pinned host slots on each engine that has device memory, through which
// a request travels when no transport reaches its memory directly (GPU
// memory at either end and tcp between the hosts).
type Staging struct {
	// Pool is the bytes of host memory an engine stages through, for its
	// own requests and for its peers' (the receiving side's slots); the
	// engine allocates it when device memory is first registered.
	Pool int64
	// SliceSize is the bytes of one slot: a staged request is pipelined
	// in slices of this size.
	SliceSize int64
	// Depth is how many slices of one request may be in its pipeline at
	// once.
	Depth int
}

// Staging defaults and bounds.
const (
	DefaultStagingPool  = 256 << 20
	DefaultStagingSlice = 4 << 20
	DefaultStagingDepth = 8
)

// Supervise says how the engine watches its plugins for stalls: a plugin
// whose process runs but whose lane holds work and completes nothing for
// StallAfter, and that then does not answer a liveness probe within
// ProbeTimeout, is killed and restarted like one that exited. Zero
// durations mean the defaults.
type Supervise struct {
	StallAfter   time.Duration // quiet time with work outstanding before a probe
	ProbeTimeout time.Duration // how long a probe may go unanswered
	Interval     time.Duration // how often the lanes are looked at
	// Off turns stall detection off (stall_after = "0s" in a file); exits
	// are still seen and restarted.
	Off bool
	// ContractViolations completion contract violations (unknown tokens,
	// duplicate completions, over-long byte counts) within ContractWindow
	// make a plugin faulty: it is killed and restarted. ContractOff
	// (contract_violations = 0 in a file) only counts and logs them.
	ContractViolations int
	ContractWindow     time.Duration
	ContractOff        bool
	// EndGrace bounds "ended": a task canceled or timed out while a
	// plugin holds slices of it is reported ended only once they are back
	// (aborted, where the plugin can) or the plugin is gone; a plugin
	// that holds them for EndGrace is killed and restarted.
	EndGrace time.Duration
	// UpgradeDrain bounds how long a live upgrade lets the old run of a
	// plugin finish what it holds and serve peers that have not moved;
	// past it, what it still holds fails over to the new run as after a
	// death.
	UpgradeDrain time.Duration
}

// WithDefaults returns s with every zero duration replaced by its default.
func (s Supervise) WithDefaults() Supervise {
	s.StallAfter = cmp.Or(s.StallAfter, DefaultStallAfter)
	s.ProbeTimeout = cmp.Or(s.ProbeTimeout, DefaultProbeTimeout)
	s.Interval = cmp.Or(s.Interval, DefaultSuperviseInterval)
	if s.ContractViolations == 0 && !s.ContractOff {
		s.ContractViolations = DefaultContractViolations
	}
	s.ContractWindow = cmp.Or(s.ContractWindow, DefaultContractWindow)
	s.EndGrace = cmp.Or(s.EndGrace, DefaultEndGrace)
	s.UpgradeDrain = cmp.Or(s.UpgradeDrain, DefaultUpgradeDrain)
	return s
}

// defaultFile names the source of settings that Default made up.
const defaultFile = "<default config>"

// Default returns a configuration that runs one engine alone on this
// machine: an embedded metastore on 127.0.0.1:0, the tcp plugin listening on
// 127.0.0.1:0, and the default transfer settings.
//
// Its cluster secret is the file $FERRY_CLUSTER_SECRET_FILE names when it
// is set (ClusterSecretFile), else one this process generated
// (ClusterSecret = GeneratedSecret()): every engine the process makes from
// Default shares it, so they sign and authenticate what they say to each
// other and warn of nothing. An engine in another process knows it only
// through a file: give every engine of the cluster the same
// FERRY_CLUSTER_SECRET_FILE (or set ClusterSecret or ClusterSecretFile).
func Default(name string) *Config {
	var secretFile string
	var secret []byte
	if secretFile = os.Getenv(SecretFileEnv); secretFile == "" {
		secret = GeneratedSecret()
	}
	return &Config{
		Name:              name,
		MachineID:         DefaultMachineID(),
		ClusterSecretFile: secretFile,
		ClusterSecret:     secret,
		Metastore:         Metastore{Kind: MetastoreEmbedded, Listen: DefaultMetastoreListen},
		Plugins: []Plugin{{
			Name:       "tcp",
			Enabled:    true,
			Body:       []byte(`listen = ["127.0.0.1:0"]` + "\n"),
			BodyFile:   defaultFile,
			BodyLine:   1,
			BodyColumn: 1,
			DeclRange:  defaultFile,
		}, {
			// Same-machine peers are reached through shared memory.
			Name:       "shm",
			Enabled:    true,
			BodyFile:   defaultFile,
			BodyLine:   1,
			BodyColumn: 1,
			DeclRange:  defaultFile,
		}},
		// GPU memory is reached through these, started when device
		// memory is first registered; without a GPU they say why.
		Devices: []Plugin{
			{Name: "cuda", Enabled: true, BodyFile: defaultFile, BodyLine: 1, BodyColumn: 1, DeclRange: defaultFile},
			{Name: "rocm", Enabled: true, BodyFile: defaultFile, BodyLine: 1, BodyColumn: 1, DeclRange: defaultFile},
		},
		Transfer: defaultTransfer(),
		Staging:  Staging{Pool: DefaultStagingPool, SliceSize: DefaultStagingSlice, Depth: DefaultStagingDepth},
	}
}

// defaultTransfer is the transfer block's defaults, from its table.
func defaultTransfer() Transfer {
	var t Transfer
	transferTable.Defaults(&t)
	return t
}

// MetastoreField is the setting that says where the metastore is: listen
// (embedded), url (http), address (redis) or endpoints (etcd), as
// "metastore.listen"; "metastore" for none.
func (c *Config) MetastoreField() string {
	switch c.Metastore.Kind {
	case MetastoreEmbedded:
		return "metastore.listen"
	case MetastoreHTTP:
		return "metastore.url"
	case MetastoreRedis:
		return "metastore.address"
	case MetastoreEtcd:
		return "metastore.endpoints"
	}
	return "metastore"
}

// Error is one problem in a configuration: "file:line:col: field:
// message". Load, Parse and Validate return one *Error, or several joined
// with errors.Join; find them with errors.As. It is conf.Error, which
// plugins' settings report too.
type Error = conf.Error

// Where returns where field (as written in the file: "metrics.listen",
// or a block: "metrics") was set, as "file:line:col", falling back to
// its block and then to the file; "" for a Config built in code.
func (c *Config) Where(field string) string {
	r := c.where(field)
	if r.Filename == "" {
		return ""
	}
	if r.Start.Line == 0 {
		return r.Filename
	}
	return conf.PosString(r)
}
