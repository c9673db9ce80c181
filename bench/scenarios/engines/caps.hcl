# The initiator's config for bench/scenarios/caps.hcl: tcp and shm, and a
# qos block that caps one tenant per transport at the rate the scenario's
# tenant block reports against.
#
#   ferry bench --qos bench/scenarios/caps.hcl --config bench/scenarios/engines/caps.hcl

name = "bench-caps"

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
  tenant "bulk" {
    weight = 1
  }

  # Its streams run over tcp only. The bucket holds one request (16
  # MiB): with the default depth (10 ms of the rate) a dispatcher woken
  # late on a loaded machine loses the tokens past it, and the tenant
  # falls below its cap.
  tenant "capped-tcp" {
    weight = 1
    rate   = "250MB"
    burst  = "16MiB"
  }

  # Its streams run over shm only.
  tenant "capped-shm" {
    weight = 1
    rate   = "500MB"
    burst  = "16MiB"
  }
}
