// Package sdk is what a transport plugin author imports: the Transport
// interface (transport.go) in plain Go types, the optional interfaces a
// Transport may add (Drainer, Aborter; found by type assertion and listed in
// Describe), the capabilities Info declares, and ServeTransport to run it
// as a plugin process. It owns the plugin side of the protocol: the
// go-plugin handshake and version negotiation, the gRPC control plane
// server, the plugin side of the shared-memory lanes, and the fd socket
// through which memory arrives. Memory the host's application allocated
// itself arrives as a Region with Foreign set and nothing mapped, only to
// a transport that declares Info.ForeignMemory, and only after the SDK
// read the range's ends by cross-memory attach (sdk/xmem).
//
// A transport whose requests complete on a goroutine of its own (a socket
// reader, say) should call Assist on the Completer (see Assister) when that
// goroutine has finished a request and is about to wait again: for a
// caller that sends one small request after another, the next request is
// then taken by a thread that already runs, instead of waking the lane's.
//
// A transport that serves descriptors on the lane's goroutine, or on
// goroutines of its own that have Ps to themselves (shm's copy workers),
// should implement SpinsAlone: its lanes then spin for the host's next
// descriptor without handing their P to other goroutines at every look.
// A transport whose connection goroutines need that P (tcp) should not.
// Such a transport may also take a lane's runs of descriptors in one call
// each (RunSubmitter, with kit.Run for the lookups a run shares).
//
// A transport runs its bulk work (low-priority copies, the goroutines of
// connections that carry only normal and low priority) on goroutines
// that call LowerThread: each runs on an OS thread of higher niceness, with
// a P of its own, so that latency-critical work on the same cores gets
// them first (threadprio.go; plugins expose it as bulk_nice).
//
// GUIDE.md, beside this file, is the whole plugin contract for a vendor
// (who checks what, the completion rule and what the host does with each
// violation, threading, capabilities, fencing, config, versions), and
// examples/transport is the template to copy.
//
// It must not import anything from host/, nor hold host-side code: the
// host's client and launcher live in internal/pluginclient, and a vendor
// builds a plugin from the SDK alone.
package sdk
