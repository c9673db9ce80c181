# The engines' config for the isolation check of `ferry bench --qos
# default` (bench/scenarios/mixed.hcl): tcp and shm, three lanes with the
# high class on a lane of its own, the low class's in-flight bytes bounded,
# and tcp's bulk connections on nice threads (bulk_nice; with it, tcp's
# bulk_chunk and short scheduler slices for its other threads, docs/qos.md
# "Bulk work at a lower CPU priority"). The bench's target engine runs with
# the same config.
#
#   ferry bench --qos default --config bench/scenarios/engines/isolation.hcl

name = "bench-isolation"

metastore {
  kind   = "embedded"
  listen = "127.0.0.1:0"
}

plugin "tcp" {
  config {
    listen    = ["127.0.0.1:0"]
    bulk_nice = 10
  }
}

plugin "shm" {}

transfer {
  lanes = 3
}

qos {
  lanes = "per_class"

  class "low" {
    inflight_bytes = "8MiB"
  }

  tenant "a" {
    weight = 3
  }

  tenant "b" {
    weight = 1
  }
}
