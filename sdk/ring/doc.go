// Package ring owns the data-plane layout shared by the host and a plugin:
// fixed-size descriptors ([Descriptor]) and the single-producer,
// single-consumer ring that carries them through shared memory ([Ring]).
//
// One process creates a ring in memory it maps ([Init]); the other
// attaches to the same bytes ([Attach]). The producer writes slots and
// publishes them with one atomic store of the tail; the consumer copies
// them out and frees them with one store of the head. Each side spins for
// a short time budget when it has nothing to do and then sleeps on a
// futex word in the shared header, which the other side wakes only when
// the sleeping flag says it must.
//
// The package must not allocate or map memory (package shm does), must
// not interpret descriptors beyond decoding them (the plugin validates
// every copy against what was registered), must not trust anything the
// other process wrote (indices are range-checked, headers validated), and
// must never block without a time limit, except in the idle sleep
// (SleepIdle), which the caller ends by the stop it passes and a Wake:
// callers loop and check liveness between waits.
package ring
