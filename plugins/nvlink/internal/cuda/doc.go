// Package cuda is the least of the CUDA driver API that plugins/nvlink
// needs, loaded at run time: libcuda.so.1 is opened with dlopen, so the
// plugin builds and starts on machines without a driver (Load then says
// why not) and links no NVIDIA library. It owns the symbol table and the
// calls; it must not keep state of the transport's (imports, streams
// belong to the caller). devices/cuda (branch dev-b) writes the full
// binding; when it lands as a reusable package this one goes.
//
// The driver's current context is per OS thread: every call that needs
// one runs inside Context.Do, which locks the goroutine to its thread and
// pushes the context for the call's length.
package cuda
