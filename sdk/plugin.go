package sdk

import (
	"context"
	"errors"
	"sync/atomic"

	plugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	devicev1 "github.com/ferrydev/ferry/internal/proto/device/v1"
	transportv1 "github.com/ferrydev/ferry/internal/proto/transport/v1"
	"github.com/ferrydev/ferry/sdk/shm"
)

// TransportPlugin adapts a Transport to go-plugin on the plugin side.
// ServeTransport builds one per protocol version it serves; an in-process
// test harness (plugintest.Connect) builds one to serve a Transport over
// gRPC without a process. The host side lives in the host, not here.
type TransportPlugin struct {
	plugin.NetRPCUnsupportedPlugin

	// Impl is the plugin's implementation.
	Impl Transport
	// FDs is where the host's memfds arrive (the inherited fd socket).
	// Without it RegisterMemory and AttachLane fail with "no fd socket".
	FDs *shm.FDReceiver
	// Protocol is the protocol version this plugin set serves, which
	// Describe reports; 0: ProtocolVersion.
	Protocol int

	srv atomic.Pointer[server] // set once gRPC serves
}

var _ plugin.GRPCPlugin = (*TransportPlugin)(nil)

// GRPCServer registers the transport service.
func (p *TransportPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	v := p.Protocol
	if v == 0 {
		v = ProtocolVersion
	}
	srv := newServer(p.Impl, p.FDs, uint32(v))
	p.srv.Store(srv)
	transportv1.RegisterTransportServer(s, srv)
	return nil
}

var errPluginSide = errors.New("sdk.TransportPlugin is the plugin side; a host dispenses transports through its own plugin set")

// GRPCClient is never used: the host has its own half of the plugin.
func (p *TransportPlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errPluginSide
}

// Stop stops the transport the way the host's Stop would (lanes, then the
// transport, then the mappings; once); before gRPC serves, it stops Impl.
// ServeTransport calls it when the host goes away, an in-process harness
// at its end.
func (p *TransportPlugin) Stop(ctx context.Context) error {
	if s := p.srv.Load(); s != nil {
		return s.stop(ctx)
	}
	return p.Impl.Stop(ctx)
}

// DevicePlugin adapts a Device to go-plugin on the plugin side, as
// TransportPlugin does a Transport: ServeDevice builds one per protocol
// version it serves, an in-process harness one to serve a Device over
// gRPC without a process.
type DevicePlugin struct {
	plugin.NetRPCUnsupportedPlugin

	// Impl is the plugin's implementation.
	Impl Device
	// FDs is where the host's memfds arrive (the inherited fd socket).
	// Without it RegisterHost fails with "no fd socket".
	FDs *shm.FDReceiver

	srv atomic.Pointer[deviceServer] // set once gRPC serves
}

var _ plugin.GRPCPlugin = (*DevicePlugin)(nil)

// GRPCServer registers the device service.
func (p *DevicePlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	srv := newDeviceServer(p.Impl, p.FDs)
	p.srv.Store(srv)
	devicev1.RegisterDeviceServer(s, srv)
	return nil
}

// GRPCClient is never used: the host has its own half of the plugin.
func (p *DevicePlugin) GRPCClient(context.Context, *plugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errDevicePluginSide
}

var errDevicePluginSide = errors.New("sdk.DevicePlugin is the plugin side; a host dispenses devices through its own plugin set")

// Stop stops the device the way the host's Stop would (the device, then
// the host mappings; once); before gRPC serves, it stops Impl.
func (p *DevicePlugin) Stop(ctx context.Context) error {
	if s := p.srv.Load(); s != nil {
		return s.stop(ctx)
	}
	return p.Impl.Stop(ctx)
}
