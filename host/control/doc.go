// Package control is the host-to-host control service every engine serves
// for its peers: fetch the engine's segment descriptor (so engines find
// each other with no metastore: peer-to-peer mode), deliver notifications,
// and answer a liveness probe.
//
// It owns the gRPC server and client, the wire contract
// (proto/control/v1) and the receiver's deduplication of notification
// keys, which makes a sender's retry safe: a key that was delivered is
// acknowledged again but never delivered twice. It knows nothing of
// plugins, batches or metastores; the engine (package host) supplies the
// descriptor and takes delivered notifications through Handler. Bulk data
// must never travel here: messages are bounded by MaxMessage.
package control
