# The engines' config for the isolation check of `ferry bench --qos
# default` (bench/scenarios/mixed.hcl): tcp and shm, three lanes with the
# high class on a lane of its own, the low class's in-flight bytes bounded,
# and tcp's bulk connections on nice threads (bulk_nice), in chunks of
# 256KiB per system call (bulk_chunk), with kernel socket buffers of
# 256KiB (bulk_buffer); every plugin's threads other than the nice ones
# have short scheduler slices (their default since 2026-12-05): docs/qos.md
# "Bulk work at a lower CPU priority".
# bulk_buffer costs LOW about 40% of its throughput over tcp; with it
# the HIGH p99 stays within 2x of its unloaded figure on two cores
# (docs/qos.md, "Isolation: where it stands"). Give the bench's target
# engine the same config, or its tcp plugin serves the bulk at the
# built-in config's settings. tcp's priority connections' readers wait on
# threads of their own (priority_thread, on by default: docs/qos.md).
# Compare with bulk_chunk and bulk_buffer taken out (their
# defaults), or priority_thread = false.
#
#   ferry bench --qos default --config bench/scenarios/engines/isolation.hcl \
#     --target-config bench/scenarios/engines/isolation.hcl
#
# scripts/isolation-compare.sh runs it on main's binaries, on this tree's
# and on this tree's with priority_thread = false, alternated.

name = "bench-isolation"

metastore {
  kind   = "embedded"
  listen = "127.0.0.1:0"
}

plugin "tcp" {
  config {
    listen      = ["127.0.0.1:0"]
    bulk_nice   = 10
    bulk_chunk  = "256KiB"
    bulk_buffer = "256KiB"
  }
}

plugin "shm" {}

transfer {
  lanes = 3
  # Long sleeps hand their Go scheduler slot over, so that the Go
  # runtime's monitor thread does not turn to waking every 20-70 us and
  # take the cores the HIGH stream spins on (docs/qos.md, "Isolation:
  # the Go runtime's monitor thread").
  handoff_sleeps = true
  # The kernel's default slice, not the engine's 100 us one: on the short
  # slice the engine's woken bulk threads cut into the HIGH waiter's spin
  # (shm HIGH 4 KiB p99 beside the bulk 3.2-3.5 us -> 8.1-8.4 us, leakage
  # over 2 in two of six sittings). Over tcp the short slice helped (mixed
  # p99 498 -> 322 us): an engine whose cores are shared with busy
  # processes keeps the default (docs/performance.md).
  cpu_slice = "0s"
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
