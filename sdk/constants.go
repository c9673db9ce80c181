package sdk

import (
	plugin "github.com/hashicorp/go-plugin"
)

// ProtocolVersion is the version of the host<->plugin protocol this SDK
// speaks: the gRPC service in sdk/proto, the ring layout and the fd-socket
// messages together. go-plugin negotiates it (VersionedPlugins); a plugin of
// another version is refused with both versions named.
const ProtocolVersion = 1

// KindTransport is the go-plugin plugin-set key for transports.
const KindTransport = "transport"

// FDSocketEnv names the environment variable that tells a plugin which
// inherited file descriptor is the fd socket (a SOCK_SEQPACKET unix socket
// over which the host sends memfds with SCM_RIGHTS). The host sets it to 3.
const FDSocketEnv = "FERRY_FD_SOCKET"

// Handshake is the go-plugin handshake every Ferry plugin and host share.
// The cookie only keeps a plugin binary from being run by hand by mistake;
// it is not a security measure.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "FERRY_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "8e5c0f1c-ferry-transfer-engine",
}
