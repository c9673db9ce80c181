// Package transportv1 is the generated gRPC code of the host<->plugin
// control protocol (transport.proto, package ferry.transport.v1). It is
// internal: plugin authors implement sdk.Transport and the host uses
// internal/pluginclient; both convert to and from these types, so the
// generated code can change without a vendor noticing. Regenerate with
// `make proto`; never edit the .pb.go files by hand.
package transportv1
