package sdk

import (
	"context"
	"sync/atomic"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	transportv1 "github.com/ferrydev/ferry/sdk/proto/transport/v1"
	"github.com/ferrydev/ferry/sdk/shm"
)

// TransportPlugin adapts a Transport to go-plugin. Plugins do not use it
// directly (ServeTransport does); hosts use it in their plugin set to get a
// *TransportClient from Dispense.
type TransportPlugin struct {
	plugin.NetRPCUnsupportedPlugin

	// Impl is the plugin's implementation; nil on the host side.
	Impl Transport

	fds *shm.FDReceiver        // plugin side: where memfds arrive
	srv atomic.Pointer[server] // plugin side: set once gRPC serves
}

var _ plugin.GRPCPlugin = (*TransportPlugin)(nil)

// GRPCServer registers the transport service (plugin side).
func (p *TransportPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	srv := newServer(p.Impl, p.fds)
	p.srv.Store(srv)
	transportv1.RegisterTransportServer(s, srv)
	return nil
}

// GRPCClient returns a *TransportClient (host side).
func (p *TransportPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return &TransportClient{rpc: transportv1.NewTransportClient(c)}, nil
}

// PluginSets returns the VersionedPlugins map a host passes to go-plugin.
func PluginSets() map[int]plugin.PluginSet {
	return map[int]plugin.PluginSet{
		ProtocolVersion: {KindTransport: &TransportPlugin{}},
	}
}
