// Package xmem is cross-memory attach: copying bytes between a plugin and
// memory of its host process that the plugin has not mapped (memory the
// application allocated itself), with process_vm_readv and
// process_vm_writev. The host grants its plugins the ptrace access these
// need (PR_SET_PTRACER) and checks the system's ptrace scope before it
// registers such memory; a copy into memory the application has freed
// fails with ErrFault and touches nothing.
//
// It owns only the copy: which ranges a plugin may touch is the region
// table's business (sdk/kit), and it must not cache addresses or keep
// state between calls.
package xmem
