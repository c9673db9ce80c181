// Package config reads an engine's HCL configuration: its segment name, its
// metastore, the plugins it loads and the transfer knobs.
//
// Load and Parse decode a file with hashicorp/hcl/v2 and return a Config or
// an error that points at file:line:column and says what to do. Validate
// checks a Config however it was built (from a file, or in code from
// Default). The package owns the schema and its defaults; it starts nothing,
// opens no sockets and does not look for plugin binaries (host/loader does).
//
// Every setting is declared once, in a table per block (schema.go): its
// name, type, default, range or allowed words, documentation and the Go
// field it lands in. Decoding, defaults, the range and word checks and
// their errors, and the reference (Reference, kept in docs/config.md by a
// test) all come from those tables; table.go is the machinery. A new block
// costs a struct, a table and a line in blocks. A word that is known but
// cannot take effect yet (file segments, cuda and rocm memory) is refused
// with the reason, never accepted and ignored.
//
// The words the tables check come from one vocabulary: memory kinds,
// permissions and priorities are sdk's (sdk/vocab.go), intents are this
// package's Intent.
//
// A plugin's `config { ... }` block is not decoded here: the host passes its
// source text, with the position where it starts, to the plugin, which
// decodes it with sdk.DecodeConfig. So a vendor adds settings without a host
// release, and the plugin's own error messages still point into the
// operator's file.
//
// A file with most settings and their defaults (docs/config.md, generated
// from the tables, lists every one):
//
//	name       = "engine-a"        # required: the engine's segment name
//	machine_id = "host-1"          # default: DefaultMachineID()
//	plugin_dir = "/opt/ferry/bin"  # default: "" (the loader looks next to the ferry binary)
//
//	metastore {
//	  kind   = "embedded"          # "embedded" (default), "http", "redis", "etcd" or "none"
//	  listen = "127.0.0.1:7070"    # embedded only; default "127.0.0.1:0"
//	  url    = "http://127.0.0.1:7070/metadata"  # http only; required there
//	}
//
//	control {                      # the service peers call: descriptor, notifications, ping
//	  listen = "127.0.0.1:0"       # default "127.0.0.1:0"; published in the descriptor
//	}
//
//	plugin "tcp" {                 # zero or more; the label is the plugin's name
//	  path    = "bin/ferry-plugin-tcp"  # default: <plugin_dir>/ferry-plugin-<name>
//	  sha256  = "<64 hex digits>"  # checked by the loader when set
//	  enabled = true               # default true
//	  config {                     # handed to the plugin undecoded
//	    listen = ["127.0.0.1:0"]
//	  }
//	}
//
//	transfer {
//	  slice_size = "1MiB"          # see ParseSize; 4KiB..1GiB
//	  ring_depth = 4096            # a power of two, 2..1048576
//	  spin       = "20us"          # a Go duration, 0..10ms
//	  lanes      = 1               # 1..64
//	  spin_small = "1ms"           # spin for batches of at most 256 KiB (latency); 0..10ms
//	  stream_pause = "20us"        # pause after a short run in a stream nobody waits on; 0..1ms
//	  handoff_sleeps = false       # long sleeps hand their P over: a high-priority tail beside bulk
//	  attempts   = 3               # tries a failed task gets in all (another rail, transport,
//	                               # or the restarted plugin); 1..16, 1 = no failover
//	}
//
//	supervise {                    # how plugins are watched for stalls
//	  stall_after   = "5s"         # work outstanding, no completion for this long: probe; 100ms..1h, "0s" = off
//	  probe_timeout = "1s"         # a NOP on the lane or a control call unanswered this long: stalled,
//	                               # killed and restarted; 1ms..1m
//	  interval      = "1s"         # how often lanes are looked at; 10ms..1m
//	}
//
//	policy "kv-local" {            # zero or more; evaluated in file order, first match wins
//	  match {                      # optional; every condition must hold; none: every request
//	    segment       = "memory"   # default both; "file" is refused until file segments exist
//	    same_machine  = true       # default either
//	    local_memory  = "cpu"      # "cpu" or "*" (default); "cuda" and "rocm" are refused until a
//	                               # device plugin exists (local memory is always cpu today)
//	    remote_memory = "*"
//	    min_size      = "0"        # inclusive, see ParseSize
//	    max_size      = "1MiB"     # inclusive; default no bound
//	    priorities    = ["high"]   # any of "normal", "high", "low"; default any
//	    intents       = ["foreground_get"]  # any of foreground_get, background_prefetch,
//	                               # migration, checkpoint, weight_loading; default any
//	  }
//	  transports = ["shm", "tcp"]  # required: configured plugin names, in the order to try them
//	  rails      = ["fast"]        # allowed rails: rail block labels or the plugins' rail names; default any
//	}
//
//	rail "fast" {                  # names one rail of a transport; any number
//	  transport      = "tcp"       # required: a configured plugin
//	  device         = "10.1.0.1:7100"  # required: the plugin's name for it (tcp: a listen address as written)
//	  numa_node      = 0           # optional: overrides the probe's
//	  bandwidth_gbps = 25          # optional: seeds the engine's bandwidth estimate
//	}
//
// A request that names a policy gets it whatever its match block says; a
// request's transport hint pins its first attempt. Without a matching
// policy, a same-machine peer is reached over a same-machine transport
// (shm), another over the first configured transport both engines have. A
// policy that names a transport that is not a configured plugin is an error
// at load. See examples/policies.hcl.
//
// Relative paths (plugin_dir, a plugin's path) are relative to the directory
// of the config file, and Parse makes them absolute. No expressions beyond
// literals are allowed: there are no variables or functions.
package config
