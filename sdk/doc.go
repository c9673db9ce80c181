// Package sdk is what a transport plugin author imports: the Transport
// interface (transport.go) in plain Go types, ServeTransport to run it as a
// plugin process, and the host-side TransportClient. It owns the go-plugin
// handshake, the gRPC control plane adapters, the plugin side of the
// shared-memory lanes, and the fd socket through which memory arrives.
//
// A transport whose requests complete on a goroutine of its own (a socket
// reader, say) should call Assist on the Completer (see Assister) when that
// goroutine has finished a request and is about to wait again: for a
// caller that sends one small request after another, the next request is
// then taken by a thread that already runs, instead of waking the lane's.
//
// It must not import anything from host/: a vendor builds a plugin from the
// SDK alone.
package sdk
