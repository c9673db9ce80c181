# One engine alone on this machine: it serves its own metastore and moves
# bytes over TCP on the loopback interface.
#
#   ferry run --config config/examples/single-node.hcl

name = "single"

# Descriptors are served from inside this engine; port 0 picks a free port.
metastore {
  kind   = "embedded"
  listen = "127.0.0.1:0"
}

# The plugin binary is <plugin_dir>/ferry-plugin-tcp; with plugin_dir unset,
# the directory of the ferry binary. The config block goes to the plugin
# undecoded.
plugin "tcp" {
  config {
    listen               = ["127.0.0.1:0"]
    connections_per_peer = 2
  }
}

# Same-machine peers are reached through shared memory; the engine prefers
# it over TCP when both engines run on this machine.
plugin "shm" {}

transfer {
  slice_size = "1MiB"
  ring_depth = 4096
  spin       = "20us"
  lanes      = 1
}
