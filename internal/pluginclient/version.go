package pluginclient

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ferrydev/ferry/sdk"
)

// HostVersions returns the protocol versions this host speaks, oldest
// first: every version up to the SDK's. Version 1 plugins have no
// capabilities and no optional interfaces; the host reads their zero
// capabilities as "unknown" and uses its defaults.
func HostVersions() []int { return []int{1, 2} }

func speaks(v int) bool { return slices.Contains(HostVersions(), v) }

// hostPlugin is the host side of the transport plugin: Dispense returns a
// *Client from it.
type hostPlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

var _ plugin.GRPCPlugin = hostPlugin{}

func (hostPlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return fmt.Errorf("the host side of the transport plugin serves nothing; plugins serve with sdk.ServeTransport")
}

func (hostPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return New(c, nil), nil
}

// PluginSets returns the VersionedPlugins map a host passes to go-plugin:
// one set per version in HostVersions. The client is the same for all:
// what a version-1 plugin lacks, it answers Unimplemented or leaves zero.
func PluginSets() map[int]plugin.PluginSet {
	sets := make(map[int]plugin.PluginSet)
	for _, v := range HostVersions() {
		sets[v] = plugin.PluginSet{sdk.KindTransport: hostPlugin{}}
	}
	return sets
}

// VersionError is a plugin that shares no protocol version with the host.
type VersionError struct {
	Path string // the plugin binary
	// PluginVersions are the versions the plugin offered. go-plugin's
	// handshake carries one: when the plugin serves none of the host's
	// versions, its lowest.
	PluginVersions []int
	HostVersions   []int // the versions this host speaks, oldest first
	Err            error // go-plugin's refusal, or nil
}

func (e *VersionError) Error() string {
	pv, hv := joinInts(e.PluginVersions), joinInts(e.HostVersions)
	s := fmt.Sprintf("plugin %s speaks protocol version %s, this host speaks %s: ", e.Path, pv, hv)
	if len(e.PluginVersions) > 0 && len(e.HostVersions) > 0 && slices.Min(e.PluginVersions) > slices.Max(e.HostVersions) {
		s += fmt.Sprintf("the plugin is newer than the host; upgrade Ferry to a release that speaks protocol %s, or install a build of the plugin for protocol %d or older",
			pv, slices.Max(e.HostVersions))
	} else {
		s += fmt.Sprintf("rebuild the plugin against a Ferry SDK that serves protocol %s (this host's SDK serves %d to %d)",
			hv, sdk.MinProtocolVersion, sdk.ProtocolVersion)
	}
	return s
}

// Unwrap returns go-plugin's refusal.
func (e *VersionError) Unwrap() error { return e.Err }

func joinInts(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ", ")
}

// hostDevicePlugin is the host side of the device plugin: Dispense returns
// a *DeviceClient from it.
type hostDevicePlugin struct {
	plugin.NetRPCUnsupportedPlugin
}

var _ plugin.GRPCPlugin = hostDevicePlugin{}

func (hostDevicePlugin) GRPCServer(*plugin.GRPCBroker, *grpc.Server) error {
	return fmt.Errorf("the host side of the device plugin serves nothing; plugins serve with sdk.ServeDevice")
}

func (hostDevicePlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return NewDevice(c, nil), nil
}

// DevicePluginSets returns the VersionedPlugins map LaunchDevice passes to
// go-plugin: the versions of HostVersions from sdk.DeviceProtocolVersion
// on, each with the device kind only. A transport binary launched as a
// device passes the handshake and fails its first call (Unimplemented).
func DevicePluginSets() map[int]plugin.PluginSet {
	sets := make(map[int]plugin.PluginSet)
	for _, v := range HostVersions() {
		if v >= sdk.DeviceProtocolVersion {
			sets[v] = plugin.PluginSet{sdk.KindDevice: hostDevicePlugin{}}
		}
	}
	return sets
}
