// Package metastore stores segment descriptors where peers can find them.
//
// A Store is a flat key/value map: keys are descriptor names chosen by the
// segment package, values are opaque bytes. The package owns the storage
// backends and their wire protocols; it does not know what a descriptor
// contains, and it must not interpret values.
//
// Backends:
//
//   - NewMemory: a map in this process, for tests and single-process
//     engines.
//   - Server / Listen: the embedded HTTP metastore, started inside an engine
//     or by `ferry metad`. It speaks the protocol of Mooncake's HTTP
//     metadata server (GET, PUT, DELETE on /metadata?key=<key>), so a
//     Mooncake client can use it and NewHTTPClient can use Mooncake's.
//   - NewHTTPClient: a Store that talks to such a server.
//
// Redis and etcd backends with leases and watches are planned; they will
// implement the same Store interface.
package metastore
