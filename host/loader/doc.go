// Package loader finds plugin binaries, verifies them, starts them as
// separate processes through hashicorp/go-plugin (internal/pluginclient),
// hands each the fd socket through which shared memory travels, and
// watches them for exit. It reads each binary once, through one
// descriptor, into a sealed memfd that it hashes and then executes, so
// the sha256 it checks against the pin and reports is that of the code
// that runs. It settles the protocol version with each plugin (a plugin
// with none in common is a *VersionError naming both sides) and exposes
// what the plugin declared it can do: Plugin.Info's capabilities and
// Plugin.Interfaces, the optional interfaces it implements.
//
// It owns the plugin processes' lives; it must not know what a transport
// does with memory or descriptors (that is progress/ and the plugin's own
// business), nor plan from the capabilities (the host's planner does).
package loader
