// Package shm owns the shared memory that Ferry's host and plugins map
// together, and the channel that carries its file descriptors between them.
//
// A [Region] is an anonymous memfd, sized and then sealed against shrinking
// and growing, mapped read-write and shared. Its fd travels to a plugin as
// SCM_RIGHTS on a SOCK_SEQPACKET unix socketpair ([Socketpair]): the host
// end writes with an [FDSender], the end the plugin inherits (fd 3 through
// exec.Cmd.ExtraFiles) is read by an [FDReceiver], which files every message
// under the id the host chose so that a control-plane RPC can [FDReceiver.Take]
// the fds that belong to it. [Map] maps a received fd after checking its
// seals and size, because a file that could shrink under a mapping would
// kill the process with SIGBUS. [ReadOnly] reopens an fd read-only, for
// a process that may only read the memory (not a boundary against a
// process of the same user: see its documentation).
//
// The package must not interpret what is stored in the memory (rings and
// descriptors are package ring's), must not create named files (no
// /dev/shm paths that a crash would leak), and must not trust what arrives
// on the socket: malformed messages are rejected and their fds closed.
package shm
