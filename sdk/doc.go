// Package sdk is what a transport plugin author imports: the Transport
// interface (transport.go) in plain Go types, ServeTransport to run it as a
// plugin process, and the host-side TransportClient. It owns the go-plugin
// handshake, the gRPC control plane adapters, the plugin side of the
// shared-memory lanes, and the fd socket through which memory arrives.
//
// It must not import anything from host/: a vendor builds a plugin from the
// SDK alone.
package sdk
