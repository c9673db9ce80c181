# Engine A of a pair on one machine (see two-engines-b.hcl). A starts the
# metastore on a fixed port so that B can find it; start A first.
#
#   ferry run --config config/examples/two-engines-a.hcl
#   ferry run --config config/examples/two-engines-b.hcl

name = "engine-a"

metastore {
  kind   = "embedded"
  listen = "127.0.0.1:7070"
}

plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
    # Every connection between the engines proves both ends know this
    # secret (the same in two-engines-b.hcl). Generate your own, for example with
    # `openssl rand -hex 32`, and prefer keeping it in a file readable by
    # the engine only:
    #   cluster_secret_file = "/etc/ferry/cluster-secret"
    cluster_secret = "example-only-4c1f9b2e7a5d3c8e0f6b"
  }
}

transfer {
  slice_size = "1MiB"
}
