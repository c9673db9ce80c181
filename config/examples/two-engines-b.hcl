# Engine B of a pair on one machine: it publishes its descriptor to, and
# finds A's in, the metastore that engine A embeds (two-engines-a.hcl).

name = "engine-b"

metastore {
  kind = "http"
  url  = "http://127.0.0.1:7070/metadata"
}

plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
    # Every connection between the engines proves both ends know this
    # secret (the same in two-engines-a.hcl). Generate your own, for example with
    # `openssl rand -hex 32`, and prefer keeping it in a file readable by
    # the engine only:
    #   cluster_secret_file = "/etc/ferry/cluster-secret"
    cluster_secret = "example-only-4c1f9b2e7a5d3c8e0f6b"
  }
}

transfer {
  slice_size = "1MiB"
}
