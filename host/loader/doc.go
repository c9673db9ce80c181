// Package loader finds plugin binaries, verifies them, starts them as
// separate processes through hashicorp/go-plugin, hands each the fd socket
// through which shared memory travels, and watches them for exit.
//
// It owns the plugin processes' lives; it must not know what a transport
// does with memory or descriptors (that is progress/ and the plugin's own
// business).
package loader
