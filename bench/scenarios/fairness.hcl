# Fair shares and caps: two saturating tenants weighted 3:1, and a third
# one that the engine's qos block is expected to cap (cap here is only
# what the report compares the tenant's throughput with; the engine's
# own qos block sets the real cap). No HIGH stream, so no isolation
# figure. Issue 13's checks: tenants a and b get 3:1 of the bytes within
# 10% (fair_ratio 0.9 to 1.1) and tenant c stays within 10% of its cap.
#
#   ferry bench --qos bench/scenarios/fairness.hcl --config qos.hcl

duration = "1s"
warmup   = "200ms"
rounds   = 3

tenant "a" {
  weight = 3
}

tenant "b" {
  weight = 1
}

tenant "c" {
  weight = 1
  cap    = "200MB" # bytes per second
}

stream "a" {
  op       = "write"
  size     = "16MiB"
  threads  = 2
  priority = "low"
  tenant   = "a"
}

stream "b" {
  op       = "write"
  size     = "16MiB"
  threads  = 2
  priority = "low"
  tenant   = "b"
}

stream "c" {
  op       = "write"
  size     = "16MiB"
  threads  = 2
  priority = "low"
  tenant   = "c"
}
