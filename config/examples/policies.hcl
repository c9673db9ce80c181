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
    listen = ["127.0.0.1:0"]
  }
}

plugin "shm" {}

# Small KV-cache reads and writes on one machine never touch a socket.
policy "kv-local" {
  match {
    segment       = "memory"   # "memory" or "file"; default both
    same_machine  = true       # default either
    local_memory  = "cpu"      # "cpu", "cuda", "rocm" or "*"; default "*"
    remote_memory = "*"
    max_size      = "1MiB"     # inclusive; sizes as in transfer.slice_size
  }
  transports = ["shm", "tcp"]  # plugin names, in the order to try them
}

# Checkpoints and migrations go over TCP on the storage rails.
policy "bulk" {
  match {
    min_size   = "64MiB"
    priorities = ["normal", "low"]                 # any of "high", "normal", "low"
    intents    = ["checkpoint", "migration"]       # any of foreground_get,
                                                   # background_prefetch, migration,
                                                   # checkpoint, weight_loading
  }
  transports = ["tcp"]
  rails      = ["10.0.0.1:7100"]  # allowed rails; names are kept, not used yet
}

# No match block: every request. Requests name it with Policy = "tcp-only".
policy "tcp-only" {
  transports = ["tcp"]
}
