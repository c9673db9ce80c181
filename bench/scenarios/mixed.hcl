# The built-in scenario of `ferry bench --qos default`: a HIGH stream of
# 4 KiB reads with a deadline beside two saturating LOW streams of 64 MiB
# writes, one per tenant, the tenants weighted 3:1. Run it with
#
#   ferry bench --qos bench/scenarios/mixed.hcl
#
# Each round runs the HIGH stream alone, then every stream together; the
# figures come from the mixed phases, and the isolation leakage compares
# the HIGH p99 of each round's mixed phase with its p99 alone.

duration   = "1s"    # measured time of each phase
warmup     = "200ms" # unmeasured, before each phase
rounds     = 3       # alone, mixed; alone, mixed; ...
transports = ["tcp", "shm"]

tenant "a" {
  weight = 3
}

tenant "b" {
  weight = 1
}

stream "decode" {
  op       = "read"
  size     = "4KiB"
  batch    = 1
  threads  = 1
  priority = "high"
  intent   = "foreground_get"
  deadline = "5ms"
}

stream "bulk-a" {
  op       = "write"
  size     = "64MiB"
  batch    = 1
  threads  = 2
  priority = "low"
  tenant   = "a"
  intent   = "checkpoint"
}

stream "bulk-b" {
  op       = "write"
  size     = "64MiB"
  batch    = 1
  threads  = 2
  priority = "low"
  tenant   = "b"
  intent   = "checkpoint"
}
