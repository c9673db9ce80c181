# The initiator's config for bench/scenarios/promotion.hcl, promotion off
# (promotion-on.hcl and promotion-off.hcl differ only in it).
#
#   ferry bench --qos bench/scenarios/promotion.hcl --config bench/scenarios/engines/promotion-off.hcl

name = "bench-promotion-off"

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

qos {
  # No promotion: a LOW request waits behind every held MEDIUM one.
  promotion = "0s"

  # Two of the MEDIUM stream's 16 MiB writes in flight; the rest, and
  # every LOW request, are held back and dispatched as these complete.
  inflight_bytes = "32MiB"
}
