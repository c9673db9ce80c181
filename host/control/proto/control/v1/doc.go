// Package controlv1 is the generated gRPC code of the host<->host
// control service (control.proto, package ferry.control.v1): descriptor
// fetch, notifications and the liveness ping that engines serve each
// other. host/control wraps it; nothing else imports it. Regenerate with
// `make proto`; never edit the .pb.go files by hand.
package controlv1
