# Engine B of two engines on two hosts; see two-hosts-a.hcl.
#
#   ferry run --config config/examples/two-hosts-b.hcl

name = "host-b"

metastore {
  kind = "http"
  url  = "http://10.0.0.1:7070/metadata"
}

plugin "tcp" {
  config {
    listen         = ["10.0.0.2:0"]
    cluster_secret = "example-only-4c1f9b2e7a5d3c8e0f6b"
  }
}

plugin "shm" {}
