# Transport policies: which transports carry which requests.
#
#   ferry explain --config config/examples/policies.hcl --segment <peer> --op write --size 4KiB
#
# Policies are evaluated in file order and the first whose match block holds
# wins; a request may also name a policy (host.Request.Policy), which then
# applies whatever its conditions say. A request's transport hint
# (host.Request.Transport) pins the first attempt. When no policy matches,
# same-machine peers are reached over shm and others over the first
# configured transport both engines have.

name = "policies"

metastore {
  kind   = "embedded"
  listen = "127.0.0.1:0"
}

plugin "tcp" {
  config {
    listen = ["127.0.0.1:0", "127.0.0.2:0"]   # one rail per address
  }
}

# Rails are named by the transport's own name for them (for TCP, the listen
# address as written) or by a rail block, which can also state what the
# probe cannot know. Slices of a request are sprayed over the rails its
# policy allows, each to the rail expected to finish it first.
rail "storage" {
  transport      = "tcp"
  device         = "127.0.0.2:0"
  numa_node      = 0    # optional; default: from sysfs, -1 when unknown
  bandwidth_gbps = 25   # optional; seeds the learnt bandwidth
}

plugin "shm" {}

# Small KV-cache reads and writes on one machine never touch a socket.
policy "kv-local" {
  match {
    segment       = "memory"   # default both ("file" is refused: file segments do not exist yet)
    same_machine  = true       # default either
    local_memory  = "cpu"      # "cpu" or "*" (default); "cuda" and "rocm" wait for a device plugin
    remote_memory = "*"
    max_size      = "1MiB"     # inclusive; sizes as in transfer.slice_size
  }
  transports = ["shm", "tcp"]  # plugin names, in the order to try them
}

# Checkpoints and migrations go over TCP on the storage rails.
policy "bulk" {
  match {
    min_size   = "64MiB"
    priorities = ["normal", "low"]                 # any of "normal", "high", "low"
    intents    = ["checkpoint", "migration"]       # any of foreground_get,
                                                   # background_prefetch, migration,
                                                   # checkpoint, weight_loading
  }
  transports = ["tcp"]
  rails      = ["storage"]  # allowed rails: rail blocks or the transports' rail names; default all
}

# No match block: every request. Requests name it with Policy = "tcp-only".
policy "tcp-only" {
  transports = ["tcp"]
}
