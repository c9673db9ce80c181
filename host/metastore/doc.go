// Package metastore stores segment descriptors where peers can find them.
//
// A Store is a flat key/value map: keys are descriptor names chosen by the
// segment package, values are opaque bytes. Every backend is also a Leaser
// (keys bound to the writer's life: they vanish within a ttl after the
// writer stops refreshing them) and a Watcher (changes under a prefix), so
// the engine can rely on both whatever the operator configured; Open
// returns the Backend the configuration names. The package owns the
// storage backends, their wire protocols and the goroutines that keep
// leases and watches alive (each store's Close stops them); it does not
// know what a descriptor contains, and it must not interpret values.
//
// Backends:
//
//   - NewMemory: a map in this process, for tests and single-process
//     engines.
//   - Server / Listen: the embedded HTTP metastore, started inside an engine
//     or by `ferry metad`. It speaks the protocol of Mooncake's HTTP
//     metadata server (GET, PUT, DELETE on /metadata?key=<key>), so a
//     Mooncake client can use it and NewHTTPClient can use Mooncake's, plus
//     two extensions for leases (ttl_ms) and polling watches (prefix).
//     Its quotas (ServerOptions) keep a junk writer from filling it for
//     engines; it tells engines' descriptors from other entries only
//     through ServerOptions.Verify, a function the owner of the cluster
//     secret hands in, and does not otherwise look at values.
//   - NewHTTPClient: a Store that talks to such a server. Open probes it
//     (HTTPClient.Probe): Ferry's server has the extensions; on
//     Mooncake's, which has neither, leases PUT their key again every
//     ttl/3 and DELETE it on close (a crashed writer's key stays), and
//     watches poll the keys the client has read or written; anything
//     else fails Open with ErrNotMetastore. metastoretest.StartMooncake is
//     the stand-in for Mooncake's server that the tests run against.
//   - NewRedis: a Redis server; leases are keys with an expiry refreshed by
//     a heartbeat, watches use keyspace notifications or polling.
//   - NewEtcd: an etcd cluster; leases are etcd leases, watches are etcd
//     watches.
//
// Rewatch keeps a watch for its owner's life, on any backend: a start
// that fails is retried with backoff, and its state is reported.
//
// Errors name the backend, its endpoint, the operation and the key, and
// wrap the cause. Nothing here panics or exits on a metastore failure:
// leases and watches retry with backoff and report trouble on channels.
package metastore
