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
  }
}

transfer {
  slice_size = "1MiB"
}
