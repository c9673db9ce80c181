// Package validate decides whether a request can be carried at all,
// before anything is chosen or sent: a known op, a length, an open
// segment that was not retired, a local range inside one registered
// buffer, and a remote range inside one buffer of the segment's
// descriptor that allows the op. It translates both ranges into (region,
// offset), which is all a plugin is told.
//
// The package is pure: the facts (the local registry's answer, the
// descriptor's buffers) come in as plain data and a verdict goes out. It
// must not look anything up itself, build error text or allocate; the
// engine turns a Fault into its error taxonomy, naming the segment.
package validate
