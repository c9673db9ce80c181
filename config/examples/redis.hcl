# An engine that publishes its descriptor to a Redis server shared by the
# cluster. Its descriptor is written with a TTL and refreshed by a
# heartbeat: if the engine dies, peers stop seeing it within ttl.
#
#   ferry run --config config/examples/redis.hcl

name = "engine-redis"

metastore {
  kind     = "redis"
  address  = "127.0.0.1:6379"
  database = 0
  # username = "ferry"      # a Redis 6 ACL user
  # password = "secret"
  # tls      = true
  # ca_file  = "redis-ca.pem"
  ttl    = "5s"
  prefix = "ferry/"
}

plugin "tcp" {
  config {
    listen = ["127.0.0.1:0"]
  }
}
