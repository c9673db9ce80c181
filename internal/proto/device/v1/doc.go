// Package devicev1 is the generated gRPC code of the host<->device-plugin
// control protocol (device.proto, package ferry.device.v1). It is
// internal: plugin authors implement sdk.Device and the host uses
// internal/pluginclient's DeviceClient; both convert to and from these
// types. Regenerate with `make proto`; never edit the .pb.go files by
// hand.
package devicev1
