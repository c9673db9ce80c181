# An engine that shares its links by priority class and tenant: a decode
# worker's urgent 4 KiB reads (PriorityHigh) never wait behind the bulk
# offload stream (PriorityLow), and two tenants share what is left 3:1.
#
#   ferry run --config config/examples/qos.hcl

name = "qos"

metastore {
  kind   = "embedded"
  listen = "127.0.0.1:0"
}

plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
    # Bulk connections' threads at niceness 10, so that the high class's
    # connection gets the cores when it wakes (docs/qos.md; off by
    # default, since normal priority rides the bulk connections too).
    bulk_nice = 10
  }
}

plugin "shm" {}

# Three lanes per plugin: the high class gets the first to itself
# (qos.lanes below).
transfer {
  lanes = 3
}

qos {
  # A request that names no tenant (host.Request.Tenant = "") is "default"'s.
  default_tenant = "default"

  # A held-back request 2 ms from its deadline moves up a class.
  promotion = "2ms"

  # Fail at once what cannot meet its deadline, given the queue ahead and
  # the measured bandwidth, rather than let it time out later.
  reject_late = true

  # At most 4096 requests held back; then Submit waits for room ("error":
  # the request fails with ErrBusy).
  max_queued = 4096
  busy       = "block"

  # Everything dispatched, whatever its class.
  inflight_bytes = "256MiB"

  # A HIGH slice never waits in a ring behind LOW ones: HIGH has each
  # plugin's first lane, the others share the rest (see docs/qos.md).
  lanes = "per_class"

  # Bulk work at most 8 MiB in flight: what is left of the link goes to
  # the medium class.
  class "low" {
    inflight_bytes = "8MiB"
  }

  class "high" {
    inflight_requests = 256
  }

  tenant "decode" {
    weight = 3
  }

  # The offload tenant gets a quarter of the contended bytes and never
  # more than 2 GiB a second.
  tenant "offload" {
    weight = 1
    rate   = "2GiB"
    burst  = "16MiB"
  }

  # Receiver credit for two-sided transports (tcp): each sender may have
  # at most this much in flight to this engine until it grants more.
  credit {
    initial_bytes = "8MiB"
    max_bytes     = "64MiB"
  }
}
