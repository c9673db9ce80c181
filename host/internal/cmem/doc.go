// Package cmem gives tests memory from C's malloc, the kind a framework
// written in C or C++ hands an application, to register with an engine.
// It exists for host's tests only; nothing in the engine uses it.
package cmem
