// Command ferry-plugin-v99 is a test fixture: a plugin that speaks only a
// future protocol version, so that the host's refusal can be tested.
package main

import (
	plugin "github.com/hashicorp/go-plugin"

	"github.com/ferrydev/ferry/sdk"
)

func main() {
	hs := sdk.Handshake
	hs.ProtocolVersion = 99
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  hs,
		VersionedPlugins: map[int]plugin.PluginSet{99: {sdk.KindTransport: &sdk.TransportPlugin{Protocol: 99}}},
		GRPCServer:       plugin.DefaultGRPCServer,
	})
}
