package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
)

// Every setting of an engine file, one table per block (see table.go).
// The reference, docs/config.md, is generated from these tables; a test
// fails when it is stale.

var topTable = &conf.Table[Config]{
	Doc: "The engine itself.",
	Fields: []conf.Field[Config]{
		{Name: "name", Type: conf.String, Required: conf.MustSet, Example: `"engine-a"`, Hint: ", the segment name peers use to reach this engine",
			Doc: "The engine's segment name, as peers address it: at most 255 bytes of printable UTF-8 without spaces.",
			At:  func(c *Config) any { return &c.Name }},
		{Name: "machine_id", Type: conf.String, DefaultDoc: "DefaultMachineID(): a hash of /etc/machine-id",
			Doc: "Identifies the machine: engines with the same id may use same-machine transports (shared memory).",
			At:  func(c *Config) any { return &c.MachineID }},
		{Name: "plugin_dir", Type: conf.Path, DefaultDoc: "the directory of the ferry binary",
			Doc: "Where plugin binaries live.",
			At:  func(c *Config) any { return &c.PluginDir }},
		{Name: "cluster_secret_file", Type: conf.Path, Example: `"/etc/ferry/secret"`,
			Doc: "A file holding the cluster secret (at least 16 bytes, a trailing newline trimmed), the same on every engine; usually the file the tcp plugin's cluster_secret_file names. With it the engine signs its descriptor (HMAC-SHA256), refuses peers' unsigned or badly signed ones and reclaims its name from an entry that is not validly signed. Without it the metastore is trusted: anyone who can write it can redirect peers, and the engine says so at start.",
			At:  func(c *Config) any { return &c.ClusterSecretFile }},
		{Name: "strict", Type: conf.Bool, Default: true,
			Doc: "The engine refuses to start when an enabled plugin fails to start (missing binary, checksum mismatch, bad config, crash at start) or when no transport is usable. false starts it degraded, on the plugins that run, and logs what is missing. A plugin whose probe says its hardware is absent (unavailable) does not count as failed.",
			At:  func(c *Config) any { return &c.Strict }},
	},
	After: func(c *Config, _ func(string) bool) {
		if c.MachineID == "" {
			c.MachineID = DefaultMachineID()
		}
	},
}

// metastoreKinds are the metastore kinds, documented; validateMetastore
// checks them with the settings each needs.
var metastoreKinds = []conf.Choice{
	{Word: MetastoreEmbedded, Doc: "serve descriptors from this engine"},
	{Word: MetastoreHTTP, Doc: "a remote metastore at url"},
	{Word: MetastoreRedis, Doc: "a Redis server at address"},
	{Word: MetastoreEtcd, Doc: "an etcd cluster at endpoints"},
	{Word: MetastoreNone, Doc: "keep descriptors in this engine's memory: no peer can find it"},
}

var metastoreTable = &conf.Table[Metastore]{
	Name: "metastore",
	Doc:  "Where segment descriptors are published and looked up.",
	Fields: []conf.Field[Metastore]{
		{Name: "kind", Type: conf.String, Default: MetastoreEmbedded, Words: metastoreKinds, WordsInCode: true,
			Doc: "Which metastore.",
			At:  func(m *Metastore) any { return &m.Kind }},
		{Name: "listen", Type: conf.String, Default: DefaultMetastoreListen, Lazy: true, Only: []string{MetastoreEmbedded},
			Doc: "host:port the embedded metastore serves on; port 0 picks a free one.",
			At:  func(m *Metastore) any { return &m.Listen }},
		{Name: "url", Type: conf.String, Only: []string{MetastoreHTTP}, Example: `"http://10.0.0.1:7070/metadata"`,
			Doc: "The remote metastore; required with kind = \"http\".",
			At:  func(m *Metastore) any { return &m.URL }},
		{Name: "address", Type: conf.String, Only: []string{MetastoreRedis}, Example: `"10.0.0.1:6379"`,
			Doc: "The Redis server's host:port; required with kind = \"redis\".",
			At:  func(m *Metastore) any { return &m.Address }},
		{Name: "endpoints", Type: conf.Strings, Only: []string{MetastoreEtcd}, Example: `["http://10.0.0.1:2379"]`,
			Doc: "The etcd cluster's client URLs (or host:port); required with kind = \"etcd\".",
			At:  func(m *Metastore) any { return &m.Endpoints }},
		{Name: "username", Type: conf.String, Only: []string{MetastoreRedis, MetastoreEtcd},
			Doc: "User to authenticate as; needs password.",
			At:  func(m *Metastore) any { return &m.Username }},
		{Name: "password", Type: conf.String, Only: []string{MetastoreRedis, MetastoreEtcd},
			Doc: "Password of username.",
			At:  func(m *Metastore) any { return &m.Password }},
		{Name: "database", Type: conf.Int, Only: []string{MetastoreRedis}, Example: "0", Min: 0, Hint: "; Redis databases are numbered from 0",
			Doc: "Redis database number.",
			At:  func(m *Metastore) any { return &m.Database }},
		{Name: "tls", Type: conf.Bool, Default: false, Only: []string{MetastoreRedis, MetastoreEtcd},
			Doc: "Connect with TLS.",
			At:  func(m *Metastore) any { return &m.TLS }},
		{Name: "ca_file", Type: conf.Path, Only: []string{MetastoreRedis, MetastoreEtcd},
			Doc: "PEM file of CAs to trust; needs tls = true. Relative to the file's directory.",
			At:  func(m *Metastore) any { return &m.CAFile }},
		{Name: "ttl", Type: conf.Duration, Default: DefaultMetastoreTTL, Lazy: true, Min: MinMetastoreTTL, Max: MaxMetastoreTTL,
			Doc: "How long a dead engine's descriptor outlives it (the lease every kind honours).",
			At:  func(m *Metastore) any { return &m.TTL }},
		{Name: "prefix", Type: conf.String, Default: DefaultMetastorePrefix, Lazy: true,
			Doc: "Put before every key Ferry writes: 1 to 255 bytes of printable UTF-8 without spaces.",
			At:  func(m *Metastore) any { return &m.Prefix }},
	},
}

var controlTable = &conf.Table[Control]{
	Name: "control",
	Doc:  "The host-to-host control service peers call: descriptor fetch, notifications, liveness.",
	Fields: []conf.Field[Control]{
		{Name: "listen", Type: conf.String, DefaultDoc: "the address of the engine's first routable rail (its tcp listen address) at port 0, else `127.0.0.1:0`",
			Doc: "host:port to serve on; port 0 picks a free one. The descriptor publishes the address the listener got, so peers on other hosts need an address they can reach; a wildcard (`0.0.0.0:7071`) binds every interface and is published as the engine's routable address. A loopback address beside routable rails is warned about at start.",
			At:  func(c *Control) any { return &c.Listen }},
	},
}

var metricsTable = &conf.Table[Metrics]{
	Name: "metrics",
	Doc:  "Prometheus metrics of the engine: requests, bytes, stage latencies, retries, failovers, plugins, rails, segments and metastore health. Without the block no endpoint is served; an application that embeds the engine can register the same series into its own registry (host.WithMetricsRegistry).",
	Fields: []conf.Field[Metrics]{
		{Name: "listen", Type: conf.String, Required: conf.Required, Example: `"127.0.0.1:9464"`,
			Doc: "host:port to serve /metrics on (port 0 picks a free one). The engine refuses to start when the address is taken.",
			At:  func(m *Metrics) any { return &m.Listen }},
		{Name: "plugin_timeout", Type: conf.Duration, Default: DefaultMetricsPluginTimeout, Lazy: true, Min: MinMetricsPluginTimeout, Max: MaxMetricsPluginTimeout,
			Doc: "How long a scrape waits for the plugins' own counters; a plugin that is restarting or stalled does not answer in time, and the scrape exports the last counters read instead of waiting or failing.",
			At:  func(m *Metrics) any { return &m.PluginTimeout }},
	},
}

var traceTable = &conf.Table[Trace]{
	Name: "trace",
	Doc:  "The story of chosen transfers: each stage with its time, transport, attempt, slices, the selector's reasons and the cause of each failed attempt, for Engine.Status (its Traces) and `ferry status --traces`. Without the block nothing is traced and the request path pays nothing for it.",
	Fields: []conf.Field[Trace]{
		{Name: "keep", Type: conf.Int, Default: 64, Min: 1, Max: 4096,
			Doc: "How many finished stories are kept (the oldest goes first), and at most how many tasks are traced at once.",
			At:  func(c *Trace) any { return &c.Keep }},
		{Name: "sample_every", Type: conf.Int, Default: 0, Min: 0, Max: 1 << 30,
			Doc: "Also trace one task in this many; 0 traces only the requests that ask (Request.Trace).",
			At:  func(c *Trace) any { return &c.SampleEvery }},
	},
}

var pluginTable = binaryTable("plugin", "ferry-plugin-", "A plugin the engine loads; the label is its name (the binary is `ferry-plugin-<name>`): "+
	"1 to 63 lower-case letters, digits, '-' or '_'.")

// deviceTable is the device block: a device plugin (devices/cuda,
// devices/rocm, the simulated plugins/simdev), started when device memory
// is first registered or allocated, not with the engine.
var deviceTable = binaryTable("device", "ferry-device-", "A device plugin the engine loads when device memory is first registered or allocated; "+
	"the label is its name (the binary is `ferry-device-<name>`): 1 to 63 lower-case letters, digits, '-' or '_'. "+
	"Without its driver (no GPU) it says why and the engine runs on CPU memory.")

// binaryTable is the table of a block that names a plugin binary:
// plugin and device.
func binaryTable(name, prefix, doc string) *conf.Table[Plugin] {
	return &conf.Table[Plugin]{
		Name: name, Label: "name", Many: true,
		Doc: doc,
		Fields: []conf.Field[Plugin]{
			{Name: "path", Type: conf.Path, DefaultDoc: "`<plugin_dir>/" + prefix + "<name>`",
				Doc: "The " + name + " binary; relative to the file's directory.",
				At:  func(p *Plugin) any { return &p.Path }},
			{Name: "sha256", Type: conf.Hex,
				Doc: "The binary's expected digest, 64 hex digits (`sha256sum " + prefix + "<name>`); the loader checks it when set.",
				At:  func(p *Plugin) any { return &p.SHA256 }},
			{Name: "enabled", Type: conf.Bool, Default: true,
				Doc: "false keeps the block but does not load the " + name + ".",
				At:  func(p *Plugin) any { return &p.Enabled }},
		},
		Raw: []conf.Raw{{Name: "config", Doc: "The " + name + "'s own settings, handed to it undecoded with their position; " +
			"the " + name + " decodes and checks them (sdk.DecodeConfig), so its errors point into this file."}},
	}
}

var stagingTable = &conf.Table[Staging]{
	Name: "staging",
	Doc: "Staging through host memory: a request on device memory that no transport reaches directly goes device → host slot → " +
		"network → host slot → device, pipelined by slice, as one request.",
	Fields: []conf.Field[Staging]{
		{Name: "pool", Type: conf.Size, Default: int64(DefaultStagingPool), Min: int64(MinSliceSize), Max: int64(1 << 40),
			Doc: "Bytes of host memory the engine stages through (its own requests' slots and its peers'); allocated when device memory is first registered.",
			At:  func(c *Staging) any { return &c.Pool }},
		{Name: "slice_size", Type: conf.Size, Default: int64(DefaultStagingSlice), Min: int64(MinSliceSize), Max: int64(MaxSliceSize),
			Doc: "Bytes per staging slot: a staged request is pipelined in slices of this size.",
			At:  func(c *Staging) any { return &c.SliceSize }},
		{Name: "depth", Type: conf.Int, Default: DefaultStagingDepth, Min: 1, Max: 64,
			Doc: "Slices of one staged request in its pipeline at once.",
			At:  func(c *Staging) any { return &c.Depth }},
	},
}

var transferTable = &conf.Table[Transfer]{
	Name: "transfer",
	Doc:  "The data path.",
	Fields: []conf.Field[Transfer]{
		{Name: "slice_size", Type: conf.Size, Default: int64(DefaultSliceSize), Min: int64(MinSliceSize), Max: int64(MaxSliceSize),
			Doc: "Bytes per slice of a large request.",
			At:  func(t *Transfer) any { return &t.SliceSize }},
		{Name: "ring_depth", Type: conf.Int, Default: DefaultRingDepth, Min: MinRingDepth, Max: MaxRingDepth,
			Doc: "Descriptors per ring; a power of two.",
			At:  func(t *Transfer) any { return &t.RingDepth }},
		{Name: "spin", Type: conf.Duration, Default: DefaultSpin, Min: time.Duration(0), Max: MaxSpin, Hint: ` ("0s" sleeps at once)`,
			Doc: "How long a lane spins for work before it sleeps.",
			At:  func(t *Transfer) any { return &t.Spin }},
		{Name: "spin_small", Type: conf.Duration, Default: DefaultSpinSmall, Min: time.Duration(0), Max: MaxSpin,
			Hint: `, about ten network round trips ("0s": spin as for large batches)`,
			Doc:  "How long a waiter, and a lane after small work, spins for a batch of at most 256 KiB (latency). A waiter spins so only on a lane whose small batches complete in a median of 500 µs or less (shm's and tcp's on idle cores), or 50 µs or less (shm's) while the engine's spins lose their CPU to other threads; on a slower one it sleeps until the plugin wakes it.",
			At:   func(t *Transfer) any { return &t.SpinSmall }},
		{Name: "stream_pause", Type: conf.Duration, Default: DefaultStreamPause, Min: time.Duration(0), Max: MaxStreamPause,
			Hint: ` ("0s": never pause)`,
			Doc:  "How long a lane's consumer (the plugin taking submissions, the engine's reaper taking completions) leaves its ring alone after a short run in a stream nobody waits on, to take what comes meanwhile as one run.",
			At:   func(t *Transfer) any { return &t.StreamPause }},
		{Name: "handoff_sleeps", Type: conf.Bool, Default: false,
			Doc: "Every sleep on a lane's rings (the engine's and its plugins') that lasts past 50 µs hands its Go scheduler slot over, so that the Go runtime's monitor thread does not turn to waking every 20-70 µs. Keeps a high-priority stream's tail beside bulk transfers on a small machine (docs/qos.md); each long sleep then costs a thread wakeup: tcp 1 MiB writes lost a tenth of their throughput. Linux on amd64 and arm64 only; elsewhere it does nothing.",
			At:  func(t *Transfer) any { return &t.HandoffSleeps }},
		{Name: "cpu_slice", Type: conf.Duration, Default: DefaultCPUSlice, Min: time.Duration(0), Max: MaxCPUSlice,
			Hint: ` ("0s" leaves the process's threads alone)`,
			Doc:  "The CPU time slice the engine asks Linux (6.12 and later) for on every thread of its process, and the threads they start, from its start to its close: a thread woken by a completion then runs at once on a core where another process is busy, rather than at the end of that process's slice (up to a 4 ms tick). A thread's share of the CPU does not change. Values under 100 µs are taken as 100 µs; real-time threads are left alone; the last engine's close returns the threads to the kernel's default. It also lets woken threads cut into the engine's own spinning waiters: on cores of its own, an engine whose high-priority requests spin on shm beside its bulk traffic may set 0s (docs/performance.md). Older kernels: the engine logs that it could not and goes on.",
			At:   func(t *Transfer) any { return &t.CPUSlice }},
		{Name: "lanes", Type: conf.Int, Default: DefaultLanes, Min: 1, Max: MaxLanes, Hint: " (add lanes when one core cannot keep up)",
			Doc: "Lanes (ring pairs) per plugin. A call's requests go on the first lane with nothing in flight, a MiB of them at a time; callers that overlap spread over the lanes. On a machine with few cores, each busy lane's plugin goroutine spins on a core of its own.",
			At:  func(t *Transfer) any { return &t.Lanes }},
		{Name: "attempts", Type: conf.Int, Default: DefaultAttempts, Min: 1, Max: MaxAttempts, Hint: " (the tries a failed task gets in all, first included; 1: no failover)",
			Doc: "Tries a failed task gets in all: on another rail, another transport, or the restarted plugin. 1 turns failover off.",
			At:  func(t *Transfer) any { return &t.Attempts }},
		{Name: "retry_backoff", Type: conf.Duration, Default: DefaultRetryBackoff, Min: time.Duration(0), Max: MaxRetryBackoff,
			Hint: ` ("0s": retry at once)`,
			Doc:  "The pause before a failed task's first retry; each later retry doubles it, and a random jitter adds up to half.",
			At:   func(t *Transfer) any { return &t.RetryBackoff }},
		{Name: "retry_budget", Type: conf.Duration, Default: DefaultRetryBudget, Min: MinRetryBudget, Max: MaxRetryBudget,
			Doc: "How long a failed task's failover may last from its first failure, backoffs and waits for a restarting plugin included; then it ends with its cause.",
			At:  func(t *Transfer) any { return &t.RetryBudget }},
		{Name: "default_deadline", Type: conf.Duration, Default: DefaultDeadline, Min: time.Duration(0), Max: MaxDefaultDeadline,
			Hint: ` ("0s": none)`,
			Doc:  "The deadline of a request that sets none, from its submission: it ends TIMEOUT then rather than wait on a stalled peer. \"0s\": no deadline.",
			At:   func(t *Transfer) any { return &t.DefaultDeadline }},
	},
}

var superviseTable = &conf.Table[Supervise]{
	Name: "supervise",
	Doc:  "How plugins are watched for stalls: work outstanding and no completion for stall_after, then a probe unanswered for probe_timeout, and the plugin is killed and restarted. And for broken completions: contract_violations of them within contract_window, and the plugin is faulty, killed and restarted.",
	Fields: []conf.Field[Supervise]{
		{Name: "stall_after", Type: conf.Duration, Default: DefaultStallAfter, Lazy: true, Min: MinStallAfter, Max: MaxStallAfter,
			Hint: ` ("0s" turns stall detection off)`, Skip: func(s *Supervise) bool { return s.Off },
			Doc: `Quiet time with work outstanding before a probe; "0s" turns stall detection off (exits are still restarted).`,
			At:  func(s *Supervise) any { return &s.StallAfter }},
		{Name: "probe_timeout", Type: conf.Duration, Default: DefaultProbeTimeout, Lazy: true, Min: MinProbeTimeout, Max: MaxProbeTimeout,
			Doc: "How long a probe (a NOP on the lane, or a control call) may go unanswered.",
			At:  func(s *Supervise) any { return &s.ProbeTimeout }},
		{Name: "interval", Type: conf.Duration, Default: DefaultSuperviseInterval, Lazy: true, Min: MinSuperviseInterval, Max: MaxSuperviseInterval,
			Doc: "How often the lanes are looked at.",
			At:  func(s *Supervise) any { return &s.Interval }},
		{Name: "contract_violations", Type: conf.Int, Default: DefaultContractViolations, Lazy: true, Min: 0, Max: MaxContractViolations,
			Hint: ` ("0" only counts and logs them)`, Skip: func(s *Supervise) bool { return s.ContractOff },
			Doc: `Completions a plugin may get wrong (a token that names no slice sent, a duplicate, more bytes than the slice) within contract_window before it is faulty, killed and restarted; "0" only counts and logs them.`,
			At:  func(s *Supervise) any { return &s.ContractViolations }},
		{Name: "contract_window", Type: conf.Duration, Default: DefaultContractWindow, Lazy: true, Min: MinContractWindow, Max: MaxContractWindow,
			Doc: "The window contract_violations are counted in; as fine as interval.",
			At:  func(s *Supervise) any { return &s.ContractWindow }},
		{Name: "end_grace", Type: conf.Duration, Default: DefaultEndGrace, Lazy: true, Min: MinEndGrace, Max: MaxEndGrace,
			Doc: "How long a plugin may hold slices of a task that was canceled or timed out (they are aborted where the plugin can) before it is killed and restarted: a task is reported ended only once no plugin touches its buffer; as fine as interval.",
			At:  func(s *Supervise) any { return &s.EndGrace }},
		{Name: "upgrade_drain", Type: conf.Duration, Default: DefaultUpgradeDrain, Lazy: true, Min: MinUpgradeDrain, Max: MaxUpgradeDrain,
			Doc: "How long a live plugin upgrade (SIGHUP, Engine.UpgradePlugin) lets the old run finish what it holds and serve peers that have not yet moved to the new one; past it, what it still holds fails over to the new run as after a death.",
			At:  func(s *Supervise) any { return &s.UpgradeDrain }},
	},
	After: func(s *Supervise, set func(string) bool) {
		s.Off = set("stall_after") && s.StallAfter == 0
		s.ContractOff = set("contract_violations") && s.ContractViolations == 0
	},
}

// policyMemory are the words of local_memory and remote_memory.
var policyMemory = []conf.Choice{
	{Word: string(sdk.MemoryCPU), Doc: "host memory"},
	{Word: string(sdk.MemoryCUDA), Doc: "NVIDIA GPU memory (a device block: devices/cuda)"},
	{Word: string(sdk.MemoryROCm), Doc: "AMD GPU memory (a device block: devices/rocm)"},
	{Word: MemoryAny, Doc: "any kind"},
}

var matchTable = &conf.Table[Policy]{
	Name: "match",
	Doc:  "The policy's conditions; every one must hold. Without a match block the policy matches every request.",
	Fields: []conf.Field[Policy]{
		{Name: "segment", Type: conf.String, DefaultDoc: "both", Words: []conf.Choice{
			{Word: "memory", Doc: "an engine's registered memory"},
			{Word: "file", Doc: "a file segment", Refuse: "file segments are not implemented, so the policy would never match"},
		},
			Doc: "The kind of segment the request targets.",
			At:  func(p *Policy) any { return &p.Match.Segment }},
		{Name: "same_machine", Type: conf.Bool, DefaultDoc: "either",
			Doc: "Whether the target is on this machine.",
			At:  func(p *Policy) any { return &p.Match.SameMachine }},
		{Name: "local_memory", Type: conf.String, DefaultDoc: `"*"`, Words: policyMemory,
			Doc: "The local buffer's memory kind. Engine.Register takes host memory only, so every local buffer is cpu today.",
			At:  func(p *Policy) any { return &p.Match.LocalMemory }},
		{Name: "remote_memory", Type: conf.String, DefaultDoc: `"*"`, Words: policyMemory,
			Doc: "The target buffer's memory kind, as its descriptor lists it.",
			At:  func(p *Policy) any { return &p.Match.RemoteMemory }},
		{Name: "min_size", Type: conf.Size, DefaultDoc: "0", Min: int64(0),
			Doc: "Smallest request, inclusive.",
			At:  func(p *Policy) any { return &p.Match.MinSize }},
		{Name: "max_size", Type: conf.Size, DefaultDoc: "no bound", Min: int64(0),
			Doc: "Largest request, inclusive.",
			At:  func(p *Policy) any { return &p.Match.MaxSize }},
		{Name: "priorities", Type: conf.Strings, DefaultDoc: "any", Example: `["high"]`, Words: priorityWords(),
			Doc: "The request's priority is one of these.",
			At:  func(p *Policy) any { return &p.Match.Priorities }},
		{Name: "intents", Type: conf.Strings, DefaultDoc: "any", Example: `["foreground_get"]`, Words: intentWords(),
			Doc: "The request's declared intent is one of these.",
			At:  func(p *Policy) any { return &p.Match.Intents }},
	},
}

var policyTable = &conf.Table[Policy]{
	Name: "policy", Label: "name", Many: true,
	Doc: "Chooses the transports of a request. Policies are evaluated in file order and the first that matches wins, " +
		"unless the request names one (host.Request.Policy). Without a matching policy a same-machine peer is reached " +
		"over a same-machine transport (shm), another over the first configured transport both engines have.",
	Fields: []conf.Field[Policy]{
		{Name: "transports", Type: conf.Strings, Required: conf.Required, Example: `["shm", "tcp"]`,
			Doc: "Configured plugin names, in the order to try them.",
			At:  func(p *Policy) any { return &p.Transports }},
		{Name: "rails", Type: conf.Strings, DefaultDoc: "any", Example: `["eth0"]`,
			Doc: "The rails slices may use: rail block labels or the plugins' own rail names.",
			At:  func(p *Policy) any { return &p.Rails }},
	},
	Sub: []*conf.Table[Policy]{matchTable},
}

var railTable = &conf.Table[RailBlock]{
	Name: "rail", Label: "name", Many: true,
	Doc: "Names one rail of a transport and states what the plugin's probe cannot know about it. " +
		"Policies name rails by the label or by the plugin's own name.",
	Fields: []conf.Field[RailBlock]{
		{Name: "transport", Type: conf.String, Required: conf.Required,
			Doc: "A configured plugin.",
			At:  func(r *RailBlock) any { return &r.Transport }},
		{Name: "device", Type: conf.String, Required: conf.Required,
			Doc: "The plugin's name for the rail (tcp: one of its listen addresses, as written).",
			At:  func(r *RailBlock) any { return &r.Device }},
		{Name: "numa_node", Type: conf.Int, DefaultDoc: "the probe's", Example: "0", Min: -1, Hint: ": want a node number, or -1 for unknown",
			Doc: "The NUMA node of the rail's device; -1 for unknown.",
			At:  func(r *RailBlock) any { return &r.NUMANode }},
		{Name: "bandwidth_gbps", Type: conf.Number, DefaultDoc: "the probe's", Example: "25", Min: 0.0, Max: 1e6,
			Doc: "Nominal bandwidth in gigabits per second; seeds the sprayer's estimate.",
			At:  func(r *RailBlock) any { return &r.BandwidthGbps }},
	},
}

func priorityWords() []conf.Choice {
	var l []conf.Choice
	for _, p := range sdk.Priorities {
		l = append(l, conf.Choice{Word: p.String()})
	}
	return l
}

func intentWords() []conf.Choice {
	var l []conf.Choice
	for _, in := range Intents {
		l = append(l, conf.Choice{Word: string(in)})
	}
	return l
}

// block is one block type of the file: how to decode an instance into a
// Config, how to check it, and its table for the reference.
type block struct {
	header hcl.BlockHeaderSchema
	// preset writes the block's defaults into c before the file is
	// decoded; nil for repeated blocks.
	preset func(c *Config)
	decode func(d *decoder, c *Config, b *hcl.Block)
	doc    conf.Describer
}

// blocks lists the file's blocks, in reference order. A new block is a
// struct, a table and a line here.
var blocks = []block{
	single(metastoreTable, func(c *Config) *Metastore { return &c.Metastore }),
	single(controlTable, func(c *Config) *Control { return &c.Control }),
	single(metricsTable, func(c *Config) *Metrics { return &c.Metrics }),
	presence(traceTable, func(c *Config) *Trace { return &c.Trace }),
	many(pluginTable, func(l labelled) Plugin { return Plugin{Name: l.name, DeclRange: l.decl, loc: l.loc} },
		func(d *decoder, c *Config, b *hcl.Block, p Plugin) {
			c.Plugins = append(c.Plugins, d.pluginBody(b, "plugin", p))
		}),
	many(deviceTable, func(l labelled) Plugin { return Plugin{Name: l.name, DeclRange: l.decl, loc: l.loc} },
		func(d *decoder, c *Config, b *hcl.Block, p Plugin) {
			c.Devices = append(c.Devices, d.pluginBody(b, "device", p))
		}),
	single(transferTable, func(c *Config) *Transfer { return &c.Transfer }),
	single(stagingTable, func(c *Config) *Staging { return &c.Staging }),
	single(superviseTable, func(c *Config) *Supervise { return &c.Supervise }),
	many(policyTable, func(l labelled) Policy { return Policy{Name: l.name, DeclRange: l.decl, loc: l.loc} },
		func(_ *decoder, c *Config, _ *hcl.Block, p Policy) { c.Policies = append(c.Policies, p) }),
	many(railTable, func(l labelled) RailBlock { return RailBlock{Name: l.name, DeclRange: l.decl, loc: l.loc} },
		func(_ *decoder, c *Config, _ *hcl.Block, r RailBlock) { c.Rails = append(c.Rails, r) }),
	qosBlock(),
}

// single is a block that appears at most once and lands in one field of
// Config.
func single[T any](t *conf.Table[T], of func(*Config) *T) block {
	return block{
		header: hcl.BlockHeaderSchema{Type: t.Name},
		doc:    t,
		preset: func(c *Config) { t.Defaults(of(c)) },
		decode: func(d *decoder, c *Config, b *hcl.Block) {
			c.loc[t.Name] = b.DefRange
			conf.DecodeBody(d.Decoder, t, b.Body, of(c), conf.Place{Loc: c.loc, LocPrefix: t.Name + ".", FieldPrefix: t.Name + "."})
		},
	}
}

// presence is single for a block whose presence turns something on (trace):
// its defaults apply only when the file has the block, so a file without
// it reads as off, as a Config built in code does.
func presence[T any](t *conf.Table[T], of func(*Config) *T) block {
	b := single(t, of)
	b.preset = nil
	decode := b.decode
	b.decode = func(d *decoder, c *Config, hb *hcl.Block) {
		t.Defaults(of(c))
		decode(d, c, hb)
	}
	return b
}

// rootSchema is the top level's attributes and every block.
func rootSchema() *hcl.BodySchema {
	s := topTable.Schema()
	for _, b := range blocks {
		s.Blocks = append(s.Blocks, b.header)
	}
	return s
}
