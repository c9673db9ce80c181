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
  }
}

transfer {
  slice_size = "1MiB"
}
