# An engine that publishes its descriptor to an etcd cluster, bound to a
# lease the engine keeps alive: if the engine dies, its descriptor is gone
# within ttl and watching peers drop it.
#
#   ferry run --config config/examples/etcd.hcl

name = "engine-etcd"

metastore {
  kind      = "etcd"
  endpoints = ["http://127.0.0.1:2379"]
  # username = "ferry"      # with etcd authentication on
  # password = "secret"
  # tls      = true         # and https:// endpoints
  # ca_file  = "etcd-ca.pem"
  ttl    = "5s"
  prefix = "ferry/"
}

plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
