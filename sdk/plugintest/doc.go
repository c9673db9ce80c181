// Package plugintest is the conformance suite every Ferry transport plugin
// runs, in this repository and outside it: it starts two instances of the
// plugin binary exactly as a host does (go-plugin, fd socket, shared-memory
// rings), registers memory it owns in both, and checks round trips at many
// sizes and offsets, concurrent requests, and every rejection a transport
// must make without touching memory.
//
// Because the suite owns every mapping, it verifies the bytes on both sides
// directly rather than trusting the plugin's own reads.
package plugintest
