// Package control is the host-to-host control service every engine serves
// for its peers: fetch the engine's segment descriptor (so engines find
// each other with no metastore: peer-to-peer mode), deliver notifications,
// answer a liveness probe, and grant receiver credit (Credit; the grant's
// size is the Granter's, host/credit's, decision).
//
// It owns the gRPC server and client, the wire contract
// (proto/control/v1) and the receiver's deduplication of notification
// keys, which makes a sender's retry safe: a key that was delivered is
// acknowledged again but never delivered twice. It knows nothing of
// plugins, batches or metastores; the engine (package host) supplies the
// descriptor and takes delivered notifications through Handler. Bulk data
// must never travel here: messages are bounded by MaxMessage, and
// senders, names and keys by MaxName and MaxKey, checked before anything
// of a request is kept.
//
// With a cluster secret (Options.Secret) a notification is delivered only
// if its HMAC-SHA256 under the secret verifies over the sender's name and
// incarnation, the receiver's incarnation, its name, message, key and
// send time, and that time is within ReplayWindow of the receiver's
// clock; Status and Ping answer only a request signed the same way (a
// refusal names nothing of the engine), and so does
// Credit, whose grant the receiver MACs over the request it answers, so
// that a sender refuses a forged or replayed grant (ErrForgedGrant).
// Credit goes only to a sender that names this engine's segment and
// incarnation, as a handle of it holds them. Without a
// secret nothing here is authenticated: anyone who reaches the listener
// can notify in any engine's name and read plugin pids and paths, so the
// engine warns at start. GetDescriptor stays open: it serves the signed
// descriptor the metastore publishes anyway, and a peer that opens a
// segment by its control address needs it first.
package control
