package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
)

// Every setting of an engine file, one table per block (see table.go).
// The reference, docs/config.md, is generated from these tables; a test
// fails when it is stale.

var topTable = &table[Config]{
	doc: "The engine itself.",
	fields: []field[Config]{
		{name: "name", typ: tString, required: mustSet, example: `"engine-a"`, hint: ", the segment name peers use to reach this engine",
			doc: "The engine's segment name, as peers address it: at most 255 bytes of printable UTF-8 without spaces.",
			at:  func(c *Config) any { return &c.Name }},
		{name: "machine_id", typ: tString, defDoc: "DefaultMachineID(): a hash of /etc/machine-id",
			doc: "Identifies the machine: engines with the same id may use same-machine transports (shared memory).",
			at:  func(c *Config) any { return &c.MachineID }},
		{name: "plugin_dir", typ: tPath, defDoc: "the directory of the ferry binary",
			doc: "Where plugin binaries live.",
			at:  func(c *Config) any { return &c.PluginDir }},
		{name: "cluster_secret_file", typ: tPath, example: `"/etc/ferry/secret"`,
			doc: "A file holding the cluster secret (at least 16 bytes, a trailing newline trimmed), the same on every engine; usually the file the tcp plugin's cluster_secret_file names. With it the engine signs its descriptor (HMAC-SHA256), refuses peers' unsigned or badly signed ones and reclaims its name from an entry that is not validly signed. Without it the metastore is trusted: anyone who can write it can redirect peers, and the engine says so at start.",
			at:  func(c *Config) any { return &c.ClusterSecretFile }},
		{name: "strict", typ: tBool, def: true,
			doc: "The engine refuses to start when an enabled plugin fails to start (missing binary, checksum mismatch, bad config, crash at start) or when no transport is usable. false starts it degraded, on the plugins that run, and logs what is missing. A plugin whose probe says its hardware is absent (unavailable) does not count as failed.",
			at:  func(c *Config) any { return &c.Strict }},
	},
	after: func(c *Config, _ func(string) bool) {
		if c.MachineID == "" {
			c.MachineID = DefaultMachineID()
		}
	},
}

// metastoreKinds are the metastore kinds, documented; validateMetastore
// checks them with the settings each needs.
var metastoreKinds = []choice{
	{word: MetastoreEmbedded, doc: "serve descriptors from this engine"},
	{word: MetastoreHTTP, doc: "a remote metastore at url"},
	{word: MetastoreRedis, doc: "a Redis server at address"},
	{word: MetastoreEtcd, doc: "an etcd cluster at endpoints"},
	{word: MetastoreNone, doc: "keep descriptors in this engine's memory: no peer can find it"},
}

var metastoreTable = &table[Metastore]{
	name: "metastore",
	doc:  "Where segment descriptors are published and looked up.",
	fields: []field[Metastore]{
		{name: "kind", typ: tString, def: MetastoreEmbedded, words: metastoreKinds, wordsInCode: true,
			doc: "Which metastore.",
			at:  func(m *Metastore) any { return &m.Kind }},
		{name: "listen", typ: tString, def: DefaultMetastoreListen, lazy: true, only: []string{MetastoreEmbedded},
			doc: "host:port the embedded metastore serves on; port 0 picks a free one.",
			at:  func(m *Metastore) any { return &m.Listen }},
		{name: "url", typ: tString, only: []string{MetastoreHTTP}, example: `"http://10.0.0.1:7070/metadata"`,
			doc: "The remote metastore; required with kind = \"http\".",
			at:  func(m *Metastore) any { return &m.URL }},
		{name: "address", typ: tString, only: []string{MetastoreRedis}, example: `"10.0.0.1:6379"`,
			doc: "The Redis server's host:port; required with kind = \"redis\".",
			at:  func(m *Metastore) any { return &m.Address }},
		{name: "endpoints", typ: tStrings, only: []string{MetastoreEtcd}, example: `["http://10.0.0.1:2379"]`,
			doc: "The etcd cluster's client URLs (or host:port); required with kind = \"etcd\".",
			at:  func(m *Metastore) any { return &m.Endpoints }},
		{name: "username", typ: tString, only: []string{MetastoreRedis, MetastoreEtcd},
			doc: "User to authenticate as; needs password.",
			at:  func(m *Metastore) any { return &m.Username }},
		{name: "password", typ: tString, only: []string{MetastoreRedis, MetastoreEtcd},
			doc: "Password of username.",
			at:  func(m *Metastore) any { return &m.Password }},
		{name: "database", typ: tInt, only: []string{MetastoreRedis}, example: "0", min: 0, hint: "; Redis databases are numbered from 0",
			doc: "Redis database number.",
			at:  func(m *Metastore) any { return &m.Database }},
		{name: "tls", typ: tBool, def: false, only: []string{MetastoreRedis, MetastoreEtcd},
			doc: "Connect with TLS.",
			at:  func(m *Metastore) any { return &m.TLS }},
		{name: "ca_file", typ: tPath, only: []string{MetastoreRedis, MetastoreEtcd},
			doc: "PEM file of CAs to trust; needs tls = true. Relative to the file's directory.",
			at:  func(m *Metastore) any { return &m.CAFile }},
		{name: "ttl", typ: tDuration, def: DefaultMetastoreTTL, lazy: true, min: MinMetastoreTTL, max: MaxMetastoreTTL,
			doc: "How long a dead engine's descriptor outlives it (the lease every kind honours).",
			at:  func(m *Metastore) any { return &m.TTL }},
		{name: "prefix", typ: tString, def: DefaultMetastorePrefix, lazy: true,
			doc: "Put before every key Ferry writes: 1 to 255 bytes of printable UTF-8 without spaces.",
			at:  func(m *Metastore) any { return &m.Prefix }},
	},
}

var controlTable = &table[Control]{
	name: "control",
	doc:  "The host-to-host control service peers call: descriptor fetch, notifications, liveness.",
	fields: []field[Control]{
		{name: "listen", typ: tString, defDoc: "the address of the engine's first routable rail (its tcp listen address) at port 0, else `127.0.0.1:0`",
			doc: "host:port to serve on; port 0 picks a free one. The descriptor publishes the address the listener got, so peers on other hosts need an address they can reach; a wildcard (`0.0.0.0:7071`) binds every interface and is published as the engine's routable address. A loopback address beside routable rails is warned about at start.",
			at:  func(c *Control) any { return &c.Listen }},
	},
}

var metricsTable = &table[Metrics]{
	name: "metrics",
	doc:  "Prometheus metrics of the engine: requests, bytes, stage latencies, retries, failovers, plugins, rails, segments and metastore health. Without the block no endpoint is served; an application that embeds the engine can register the same series into its own registry (host.WithMetricsRegistry).",
	fields: []field[Metrics]{
		{name: "listen", typ: tString, required: hclRequired, example: `"127.0.0.1:9464"`,
			doc: "host:port to serve /metrics on (port 0 picks a free one). The engine refuses to start when the address is taken.",
			at:  func(m *Metrics) any { return &m.Listen }},
		{name: "plugin_timeout", typ: tDuration, def: DefaultMetricsPluginTimeout, lazy: true, min: MinMetricsPluginTimeout, max: MaxMetricsPluginTimeout,
			doc: "How long a scrape waits for the plugins' own counters; a plugin that is restarting or stalled does not answer in time, and the scrape exports the last counters read instead of waiting or failing.",
			at:  func(m *Metrics) any { return &m.PluginTimeout }},
	},
}

var traceTable = &table[Trace]{
	name: "trace",
	doc:  "The story of chosen transfers: each stage with its time, transport, attempt, slices, the selector's reasons and the cause of each failed attempt, for Engine.Status (its Traces) and `ferry status --traces`. Without the block nothing is traced and the request path pays nothing for it.",
	fields: []field[Trace]{
		{name: "keep", typ: tInt, def: 64, min: 1, max: 4096,
			doc: "How many finished stories are kept (the oldest goes first), and at most how many tasks are traced at once.",
			at:  func(c *Trace) any { return &c.Keep }},
		{name: "sample_every", typ: tInt, def: 0, min: 0, max: 1 << 30,
			doc: "Also trace one task in this many; 0 traces only the requests that ask (Request.Trace).",
			at:  func(c *Trace) any { return &c.SampleEvery }},
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
func binaryTable(name, prefix, doc string) *table[Plugin] {
	return &table[Plugin]{
		name: name, label: "name", many: true,
		doc: doc,
		fields: []field[Plugin]{
			{name: "path", typ: tPath, defDoc: "`<plugin_dir>/" + prefix + "<name>`",
				doc: "The " + name + " binary; relative to the file's directory.",
				at:  func(p *Plugin) any { return &p.Path }},
			{name: "sha256", typ: tHex,
				doc: "The binary's expected digest, 64 hex digits (`sha256sum " + prefix + "<name>`); the loader checks it when set.",
				at:  func(p *Plugin) any { return &p.SHA256 }},
			{name: "enabled", typ: tBool, def: true,
				doc: "false keeps the block but does not load the " + name + ".",
				at:  func(p *Plugin) any { return &p.Enabled }},
		},
		raw: []rawBlock{{name: "config", doc: "The " + name + "'s own settings, handed to it undecoded with their position; " +
			"the " + name + " decodes and checks them (sdk.DecodeConfig), so its errors point into this file."}},
	}
}

var stagingTable = &table[Staging]{
	name: "staging",
	doc: "Staging through host memory: a request on device memory that no transport reaches directly goes device → host slot → " +
		"network → host slot → device, pipelined by slice, as one request.",
	fields: []field[Staging]{
		{name: "pool", typ: tSize, def: int64(DefaultStagingPool), min: int64(MinSliceSize), max: int64(1 << 40),
			doc: "Bytes of host memory the engine stages through (its own requests' slots and its peers'); allocated when device memory is first registered.",
			at:  func(c *Staging) any { return &c.Pool }},
		{name: "slice_size", typ: tSize, def: int64(DefaultStagingSlice), min: int64(MinSliceSize), max: int64(MaxSliceSize),
			doc: "Bytes per staging slot: a staged request is pipelined in slices of this size.",
			at:  func(c *Staging) any { return &c.SliceSize }},
		{name: "depth", typ: tInt, def: DefaultStagingDepth, min: 1, max: 64,
			doc: "Slices of one staged request in its pipeline at once.",
			at:  func(c *Staging) any { return &c.Depth }},
	},
}

var transferTable = &table[Transfer]{
	name: "transfer",
	doc:  "The data path.",
	fields: []field[Transfer]{
		{name: "slice_size", typ: tSize, def: int64(DefaultSliceSize), min: int64(MinSliceSize), max: int64(MaxSliceSize),
			doc: "Bytes per slice of a large request.",
			at:  func(t *Transfer) any { return &t.SliceSize }},
		{name: "ring_depth", typ: tInt, def: DefaultRingDepth, min: MinRingDepth, max: MaxRingDepth,
			doc: "Descriptors per ring; a power of two.",
			at:  func(t *Transfer) any { return &t.RingDepth }},
		{name: "spin", typ: tDuration, def: DefaultSpin, min: time.Duration(0), max: MaxSpin, hint: ` ("0s" sleeps at once)`,
			doc: "How long a lane spins for work before it sleeps.",
			at:  func(t *Transfer) any { return &t.Spin }},
		{name: "spin_small", typ: tDuration, def: DefaultSpinSmall, min: time.Duration(0), max: MaxSpin,
			hint: `, about ten network round trips ("0s": spin as for large batches)`,
			doc:  "How long a waiter, and a lane after small work, spins for a batch of at most 256 KiB (latency). A waiter spins so only on a lane whose small batches complete in a median of 50 µs or less (shm); on a slower one (tcp) it sleeps until the plugin wakes it.",
			at:   func(t *Transfer) any { return &t.SpinSmall }},
		{name: "stream_pause", typ: tDuration, def: DefaultStreamPause, min: time.Duration(0), max: MaxStreamPause,
			hint: ` ("0s": never pause)`,
			doc:  "How long a lane's consumer (the plugin taking submissions, the engine's reaper taking completions) leaves its ring alone after a short run in a stream nobody waits on, to take what comes meanwhile as one run.",
			at:   func(t *Transfer) any { return &t.StreamPause }},
		{name: "lanes", typ: tInt, def: DefaultLanes, min: 1, max: MaxLanes, hint: " (add lanes when one core cannot keep up)",
			doc: "Lanes (ring pairs) per plugin.",
			at:  func(t *Transfer) any { return &t.Lanes }},
		{name: "attempts", typ: tInt, def: DefaultAttempts, min: 1, max: MaxAttempts, hint: " (the tries a failed task gets in all, first included; 1: no failover)",
			doc: "Tries a failed task gets in all: on another rail, another transport, or the restarted plugin. 1 turns failover off.",
			at:  func(t *Transfer) any { return &t.Attempts }},
		{name: "retry_backoff", typ: tDuration, def: DefaultRetryBackoff, min: time.Duration(0), max: MaxRetryBackoff,
			hint: ` ("0s": retry at once)`,
			doc:  "The pause before a failed task's first retry; each later retry doubles it, and a random jitter adds up to half.",
			at:   func(t *Transfer) any { return &t.RetryBackoff }},
		{name: "retry_budget", typ: tDuration, def: DefaultRetryBudget, min: MinRetryBudget, max: MaxRetryBudget,
			doc: "How long a failed task's failover may last from its first failure, backoffs and waits for a restarting plugin included; then it ends with its cause.",
			at:  func(t *Transfer) any { return &t.RetryBudget }},
		{name: "default_deadline", typ: tDuration, def: DefaultDeadline, min: time.Duration(0), max: MaxDefaultDeadline,
			hint: ` ("0s": none)`,
			doc:  "The deadline of a request that sets none, from its submission: it ends TIMEOUT then rather than wait on a stalled peer. \"0s\": no deadline.",
			at:   func(t *Transfer) any { return &t.DefaultDeadline }},
	},
}

var superviseTable = &table[Supervise]{
	name: "supervise",
	doc:  "How plugins are watched for stalls: work outstanding and no completion for stall_after, then a probe unanswered for probe_timeout, and the plugin is killed and restarted. And for broken completions: contract_violations of them within contract_window, and the plugin is faulty, killed and restarted.",
	fields: []field[Supervise]{
		{name: "stall_after", typ: tDuration, def: DefaultStallAfter, lazy: true, min: MinStallAfter, max: MaxStallAfter,
			hint: ` ("0s" turns stall detection off)`, skip: func(s *Supervise) bool { return s.Off },
			doc: `Quiet time with work outstanding before a probe; "0s" turns stall detection off (exits are still restarted).`,
			at:  func(s *Supervise) any { return &s.StallAfter }},
		{name: "probe_timeout", typ: tDuration, def: DefaultProbeTimeout, lazy: true, min: MinProbeTimeout, max: MaxProbeTimeout,
			doc: "How long a probe (a NOP on the lane, or a control call) may go unanswered.",
			at:  func(s *Supervise) any { return &s.ProbeTimeout }},
		{name: "interval", typ: tDuration, def: DefaultSuperviseInterval, lazy: true, min: MinSuperviseInterval, max: MaxSuperviseInterval,
			doc: "How often the lanes are looked at.",
			at:  func(s *Supervise) any { return &s.Interval }},
		{name: "contract_violations", typ: tInt, def: DefaultContractViolations, lazy: true, min: 0, max: MaxContractViolations,
			hint: ` ("0" only counts and logs them)`, skip: func(s *Supervise) bool { return s.ContractOff },
			doc: `Completions a plugin may get wrong (a token that names no slice sent, a duplicate, more bytes than the slice) within contract_window before it is faulty, killed and restarted; "0" only counts and logs them.`,
			at:  func(s *Supervise) any { return &s.ContractViolations }},
		{name: "contract_window", typ: tDuration, def: DefaultContractWindow, lazy: true, min: MinContractWindow, max: MaxContractWindow,
			doc: "The window contract_violations are counted in; as fine as interval.",
			at:  func(s *Supervise) any { return &s.ContractWindow }},
		{name: "end_grace", typ: tDuration, def: DefaultEndGrace, lazy: true, min: MinEndGrace, max: MaxEndGrace,
			doc: "How long a plugin may hold slices of a task that was canceled or timed out (they are aborted where the plugin can) before it is killed and restarted: a task is reported ended only once no plugin touches its buffer; as fine as interval.",
			at:  func(s *Supervise) any { return &s.EndGrace }},
	},
	after: func(s *Supervise, set func(string) bool) {
		s.Off = set("stall_after") && s.StallAfter == 0
		s.ContractOff = set("contract_violations") && s.ContractViolations == 0
	},
}

// policyMemory are the words of local_memory and remote_memory.
var policyMemory = []choice{
	{word: string(sdk.MemoryCPU), doc: "host memory"},
	{word: string(sdk.MemoryCUDA), doc: "NVIDIA GPU memory (a device block: devices/cuda)"},
	{word: string(sdk.MemoryROCm), doc: "AMD GPU memory (a device block: devices/rocm)"},
	{word: MemoryAny, doc: "any kind"},
}

var matchTable = &table[Policy]{
	name: "match",
	doc:  "The policy's conditions; every one must hold. Without a match block the policy matches every request.",
	fields: []field[Policy]{
		{name: "segment", typ: tString, defDoc: "both", words: []choice{
			{word: "memory", doc: "an engine's registered memory"},
			{word: "file", doc: "a file segment", refuse: "file segments are not implemented, so the policy would never match"},
		},
			doc: "The kind of segment the request targets.",
			at:  func(p *Policy) any { return &p.Match.Segment }},
		{name: "same_machine", typ: tBool, defDoc: "either",
			doc: "Whether the target is on this machine.",
			at:  func(p *Policy) any { return &p.Match.SameMachine }},
		{name: "local_memory", typ: tString, defDoc: `"*"`, words: policyMemory,
			doc: "The local buffer's memory kind. Engine.Register takes host memory only, so every local buffer is cpu today.",
			at:  func(p *Policy) any { return &p.Match.LocalMemory }},
		{name: "remote_memory", typ: tString, defDoc: `"*"`, words: policyMemory,
			doc: "The target buffer's memory kind, as its descriptor lists it.",
			at:  func(p *Policy) any { return &p.Match.RemoteMemory }},
		{name: "min_size", typ: tSize, defDoc: "0", min: int64(0),
			doc: "Smallest request, inclusive.",
			at:  func(p *Policy) any { return &p.Match.MinSize }},
		{name: "max_size", typ: tSize, defDoc: "no bound", min: int64(0),
			doc: "Largest request, inclusive.",
			at:  func(p *Policy) any { return &p.Match.MaxSize }},
		{name: "priorities", typ: tStrings, defDoc: "any", example: `["high"]`, words: priorityWords(),
			doc: "The request's priority is one of these.",
			at:  func(p *Policy) any { return &p.Match.Priorities }},
		{name: "intents", typ: tStrings, defDoc: "any", example: `["foreground_get"]`, words: intentWords(),
			doc: "The request's declared intent is one of these.",
			at:  func(p *Policy) any { return &p.Match.Intents }},
	},
}

var policyTable = &table[Policy]{
	name: "policy", label: "name", many: true,
	doc: "Chooses the transports of a request. Policies are evaluated in file order and the first that matches wins, " +
		"unless the request names one (host.Request.Policy). Without a matching policy a same-machine peer is reached " +
		"over a same-machine transport (shm), another over the first configured transport both engines have.",
	fields: []field[Policy]{
		{name: "transports", typ: tStrings, required: hclRequired, example: `["shm", "tcp"]`,
			doc: "Configured plugin names, in the order to try them.",
			at:  func(p *Policy) any { return &p.Transports }},
		{name: "rails", typ: tStrings, defDoc: "any", example: `["eth0"]`,
			doc: "The rails slices may use: rail block labels or the plugins' own rail names.",
			at:  func(p *Policy) any { return &p.Rails }},
	},
	sub: []*table[Policy]{matchTable},
}

var railTable = &table[RailBlock]{
	name: "rail", label: "name", many: true,
	doc: "Names one rail of a transport and states what the plugin's probe cannot know about it. " +
		"Policies name rails by the label or by the plugin's own name.",
	fields: []field[RailBlock]{
		{name: "transport", typ: tString, required: hclRequired,
			doc: "A configured plugin.",
			at:  func(r *RailBlock) any { return &r.Transport }},
		{name: "device", typ: tString, required: hclRequired,
			doc: "The plugin's name for the rail (tcp: one of its listen addresses, as written).",
			at:  func(r *RailBlock) any { return &r.Device }},
		{name: "numa_node", typ: tInt, defDoc: "the probe's", example: "0", min: -1, hint: ": want a node number, or -1 for unknown",
			doc: "The NUMA node of the rail's device; -1 for unknown.",
			at:  func(r *RailBlock) any { return &r.NUMANode }},
		{name: "bandwidth_gbps", typ: tNumber, defDoc: "the probe's", example: "25", min: 0.0, max: 1e6,
			doc: "Nominal bandwidth in gigabits per second; seeds the sprayer's estimate.",
			at:  func(r *RailBlock) any { return &r.BandwidthGbps }},
	},
}

func priorityWords() []choice {
	var l []choice
	for _, p := range sdk.Priorities {
		l = append(l, choice{word: p.String()})
	}
	return l
}

func intentWords() []choice {
	var l []choice
	for _, in := range Intents {
		l = append(l, choice{word: string(in)})
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
	doc    reference
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
func single[T any](t *table[T], of func(*Config) *T) block {
	return block{
		header: hcl.BlockHeaderSchema{Type: t.name},
		doc:    t,
		preset: func(c *Config) { t.defaults(of(c)) },
		decode: func(d *decoder, c *Config, b *hcl.Block) {
			c.loc[t.name] = b.DefRange
			decodeTable(d, t, b.Body, of(c), place{loc: c.loc, locPrefix: t.name + ".", fieldPrefix: t.name + "."})
		},
	}
}

// presence is single for a block whose presence turns something on (trace):
// its defaults apply only when the file has the block, so a file without
// it reads as off, as a Config built in code does.
func presence[T any](t *table[T], of func(*Config) *T) block {
	b := single(t, of)
	b.preset = nil
	decode := b.decode
	b.decode = func(d *decoder, c *Config, hb *hcl.Block) {
		t.defaults(of(c))
		decode(d, c, hb)
	}
	return b
}

// rootSchema is the top level's attributes and every block.
func rootSchema() *hcl.BodySchema {
	s := topTable.schema()
	for _, b := range blocks {
		s.Blocks = append(s.Blocks, b.header)
	}
	return s
}
