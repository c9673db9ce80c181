# An engine whose only transport is the example plugin. Two engines on one
# machine, each started from a copy of this file with its own name, move
# bytes through it (engines_test.go does exactly that).
#
#   go build -o bin/ferry-plugin-example ./cmd/ferry-plugin-example
#   sha256sum bin/ferry-plugin-example      # put the digest in sha256 below
#   ferry run --config example.hcl

name = "example-a"

metastore {
  kind   = "embedded"
  listen = "127.0.0.1:0"
}

plugin "example" {
  # Relative to this file's directory.
  path = "bin/ferry-plugin-example"
  # The loader refuses a binary whose digest differs: pin what you ship.
  sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
  config {
    queue_depth = 1024
  }
}
