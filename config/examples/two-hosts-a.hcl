# Engine A of two engines on two hosts (or containers, or network
# namespaces) that reach each other at 10.0.0.1 and 10.0.0.2; see
# two-hosts-b.hcl and the README's "Two hosts" section. A serves the
# metastore on a fixed port so that B can find it; start A first.
#
#   ferry run --config config/examples/two-hosts-a.hcl --expose 64MiB

name = "host-a"

metastore {
  kind   = "embedded"
  listen = "10.0.0.1:7070"
}

plugin "tcp" {
  config {
    # An address the other host can reach. The control service follows it
    # (it listens on 10.0.0.1 too, and the descriptor says so).
    listen         = ["10.0.0.1:0"]
    cluster_secret = "example-only-4c1f9b2e7a5d3c8e0f6b" # the same on both; generate your own
  }
}

plugin "shm" {}
