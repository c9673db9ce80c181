// Package plugintest is the conformance suite every Ferry transport plugin
// runs, in this repository and outside it: it starts two instances of the
// plugin binary exactly as a host does (go-plugin, fd socket, shared-memory
// rings), registers memory it owns in both, and checks round trips at many
// sizes and offsets, concurrent requests, and every rejection a transport
// must make without touching memory.
//
// Because the suite owns every mapping, it verifies the bytes on both sides
// directly rather than trusting the plugin's own reads.
//
// For tests without a binary it has Mock, a Transport whose every method
// is a function field, and Connect, which serves any Transport in process
// through the SDK's own gRPC server and returns the host's client for it.
//
// It drives plugins with the host's client (internal/pluginclient), the
// only package of sdk/ that may; it must not import host/.
package plugintest
