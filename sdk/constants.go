package sdk

import (
	"time"

	plugin "github.com/hashicorp/go-plugin"
)

// ProtocolVersion is the newest version of the host<->plugin protocol this
// SDK speaks: the gRPC service in internal/proto, the ring layout and the
// fd-socket messages together. go-plugin negotiates it (VersionedPlugins):
// the host lists the versions it speaks, the plugin picks the highest it
// shares, and a plugin with none in common is refused with both sides'
// versions named.
//
// Version 2 added the capabilities in Describe (Info.Ops, MaxSlice,
// PreferredSlice, the optional interfaces) and the Drain RPC. Everything
// else is version 1's, so ServeTransport serves both: a host that speaks
// only 1 talks to a plugin built with this SDK and ignores what it does
// not know.
//
// Within version 2, Describe gained fields that an older plugin does not
// send and the host reads as false: foreign_memory, two_sided,
// sealed_regions and test_tool (Info.TestTool, a plugin for tests only).
const ProtocolVersion = 2

// MinProtocolVersion is the oldest version ServeTransport serves: it serves
// every version from MinProtocolVersion to ProtocolVersion.
const MinProtocolVersion = 1

// DeviceProtocolVersion is the protocol version that added device plugins
// (the Device service of internal/proto/device): ServeDevice serves it to
// ProtocolVersion, and a host dispenses devices only at those versions.
const DeviceProtocolVersion = 2

// Lane timing: what a lane does with the spin budgets a host sends at
// AttachLane. The host's configuration (config's transfer block) defaults
// and bounds them with these same constants.
const (
	// DefaultSpin is how long a lane spins for more work before it sleeps
	// when the host sends no budget; config.DefaultSpin is this.
	DefaultSpin = 20 * time.Microsecond
	// MaxSpin bounds a spin budget: beyond it a lane burns a core for
	// nothing, and these machines have two. A lane holds the small budget
	// to it whatever the host asks; config refuses more for either.
	MaxSpin = 10 * time.Millisecond
	// SmallBatch is the most bytes a batch, or a run of descriptors a
	// lane drained, holds to count as small: the host's waiter on a
	// small batch, and a lane after a small run, spin the small budget
	// (spin_small) rather than the plain one.
	SmallBatch = 256 << 10
	// DefaultStreamPause is how long a lane (and the host's reaper of its
	// completions) leaves its ring alone after a short run in a stream
	// when the host sends no pause; config.DefaultStreamPause is this.
	DefaultStreamPause = 20 * time.Microsecond
	// MaxStreamPause bounds that pause whatever the host asks; config
	// refuses more.
	MaxStreamPause = time.Millisecond
)

// KindTransport is the go-plugin plugin-set key for transports.
const KindTransport = "transport"

// FDSocketEnv names the environment variable that tells a plugin which
// inherited file descriptor is the fd socket (a SOCK_SEQPACKET unix socket
// over which the host sends memfds with SCM_RIGHTS). The host sets it to 3.
const FDSocketEnv = "FERRY_FD_SOCKET"

// Handshake is the go-plugin handshake every Ferry plugin and host share.
// The cookie only keeps a plugin binary from being run by hand by mistake;
// it is not a security measure. Its ProtocolVersion is only go-plugin's
// default: the versions spoken are those of the VersionedPlugins maps.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "FERRY_PLUGIN_MAGIC_COOKIE",
	MagicCookieValue: "8e5c0f1c-ferry-transfer-engine",
}

// Names of the optional interfaces a Transport may implement, as Describe
// lists them (DescribeResponse.interfaces) and the host reads them.
const (
	// InterfaceDrainer: the Transport implements Drainer (protocol 2).
	InterfaceDrainer = "drainer"
	// InterfaceAborter: the Transport implements Aborter (protocol 2).
	InterfaceAborter = "aborter"
	// InterfaceConfigChecker: the Transport implements ConfigChecker
	// (protocol 2).
	InterfaceConfigChecker = "config_checker"
	// InterfaceFencer: the Transport implements Fencer (protocol 2).
	InterfaceFencer = "fencer"
	// InterfaceDeviceImporter: the Transport implements DeviceImporter
	// (protocol 2): the host may register device memory with it.
	InterfaceDeviceImporter = "device_importer"
)

// implemented lists the optional interfaces impl has, by type assertion.
func implemented(impl Transport) []string {
	var names []string
	if _, ok := impl.(Drainer); ok {
		names = append(names, InterfaceDrainer)
	}
	if _, ok := impl.(Aborter); ok {
		names = append(names, InterfaceAborter)
	}
	if _, ok := impl.(ConfigChecker); ok {
		names = append(names, InterfaceConfigChecker)
	}
	if _, ok := impl.(Fencer); ok {
		names = append(names, InterfaceFencer)
	}
	if _, ok := impl.(DeviceImporter); ok {
		names = append(names, InterfaceDeviceImporter)
	}
	return names
}
