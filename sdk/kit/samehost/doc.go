// Package samehost is the peer exchange of a same-machine transport
// plugin (plugins/shm, plugins/nvlink): how two plugins of one machine
// find each other, check each other and hand over regions. It owns the
// abstract SOCK_SEQPACKET unix socket (Link.Listen, the endpoint blob),
// the connection and its reader (Conn, Reader, fds as SCM_RIGHTS), the
// SO_PEERCRED check (same user, or root), the hello with the incarnation
// check and the cluster secret's HMAC proofs under a label per protocol
// (Link.Dial on the dialer's side; Server on the owner's, with its accept
// loop, max_conns, the query dispatch and revocation), the config
// attributes these take (Config) and their counters (Counters).
//
// What a plugin supplies: its wire format (a Codec: the byte layout is
// the plugin's, the message types and their meaning are shared), its
// name and proof label, and the answer to a region query (Server.Answer):
// what it hands over (an fd, a device handle) and what it refuses. What
// the dialer does with an answer (map an fd, import a handle) and the
// copies stay in the plugin.
//
// It must not relax a check for one plugin: every plugin that uses it
// refuses another user, a stale incarnation and a missing or wrong proof
// in the same way. It must not trust a peer (a Codec's Decode checks
// every field; an fd nobody asked for is closed), must not import the
// host (sdk/layering_test.go), and starts goroutines only in Server,
// which Close stops and waits for.
package samehost
