package main

/*
#cgo CFLAGS: -I${SRCDIR}/../include
#include <stdlib.h>
#include "ferry.h"
void ferry_set_error(const char *msg, size_t n);
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"unsafe"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

func main() {}

// revision is the commit `make build` stamps in (-ldflags -X).
var revision string

// engine is one ferry_engine_t: the host engine and the handles the C
// side holds into it.
type engine struct {
	h uint64
	e *host.Engine

	mu     sync.Mutex
	next   uint64 // the last batch or block-list handle handed out
	allocs map[uintptr][]byte
	// devAllocs is the memory of ferry_allocate_device, by address.
	devAllocs map[uint64]host.DeviceMemory
	batches   map[uint64]host.BatchID
	blocks    map[uint64]*host.BlockList
}

// engines maps the live handles; next is the last handed out. A handle
// at most next that is not in m was destroyed: handles are never reused.
var engines struct {
	sync.RWMutex
	m    map[uint64]*engine
	next uint64
}

// setError makes msg the calling thread's message. An export runs on the
// C thread that called it, and so does this call into C.
func setError(msg string) {
	if msg == "" {
		C.ferry_set_error(nil, 0)
		return
	}
	C.ferry_set_error((*C.char)(unsafe.Pointer(unsafe.StringData(msg))), C.size_t(len(msg)))
}

// fail sets the message and returns code.
func fail(code C.int, format string, args ...any) C.int {
	setError(fmt.Sprintf(format, args...))
	return code
}

// failErr sets err as the message and returns its code.
func failErr(what string, err error, fallback C.int) C.int {
	setError(what + ": " + err.Error())
	return codeOf(err, fallback)
}

// codeOf maps host's error taxonomy to ferry_error; fallback is for an
// error outside it.
func codeOf(err error, fallback C.int) C.int {
	var cerr *config.Error
	switch {
	case err == nil:
		return C.FERRY_OK
	case errors.Is(err, host.ErrClosed):
		return C.FERRY_ERR_CLOSED
	case errors.Is(err, host.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return C.FERRY_ERR_DEADLINE_EXCEEDED
	case errors.Is(err, host.ErrCanceled), errors.Is(err, context.Canceled):
		return C.FERRY_ERR_CANCELED
	case errors.Is(err, host.ErrBusy):
		return C.FERRY_ERR_BUSY
	case errors.Is(err, host.ErrNotRegistered):
		return C.FERRY_ERR_NOT_REGISTERED
	case errors.Is(err, host.ErrOutOfBounds):
		return C.FERRY_ERR_OUT_OF_BOUNDS
	case errors.Is(err, host.ErrPermission):
		return C.FERRY_ERR_PERMISSION
	case errors.Is(err, host.ErrSegmentNotFound):
		return C.FERRY_ERR_SEGMENT_NOT_FOUND
	case errors.Is(err, host.ErrTransportUnavailable):
		return C.FERRY_ERR_UNAVAILABLE
	case errors.Is(err, host.ErrPluginFailed):
		return C.FERRY_ERR_PLUGIN_FAILED
	case errors.Is(err, host.ErrInvalid):
		return C.FERRY_ERR_INVALID
	case errors.As(err, &cerr), errors.Is(err, os.ErrNotExist), errors.Is(err, os.ErrPermission):
		return C.FERRY_ERR_CONFIG
	}
	return fallback
}

// guard turns a panic of the export it is deferred in (or of the body
// onEngine runs) into FERRY_ERR_INTERNAL with the panic and its stack as
// the message: no Go panic crosses into C.
func guard(rc *C.int, what string) {
	if r := recover(); r != nil {
		*rc = fail(C.FERRY_ERR_INTERNAL, "%s: internal error (a bug in libferry; please report it with this message): %v\n%s", what, r, debug.Stack())
	}
}

// onEngine runs the export what on the engine of handle h, with what
// every export on an engine shares: a panic becomes FERRY_ERR_INTERNAL
// (guard), and a handle that names no live engine its code and message
// (lookup). body is the export's own part.
func onEngine(h C.ferry_engine_t, what string, body func(en *engine) C.int) (rc C.int) {
	defer guard(&rc, what)
	en, rc := lookup(h, what)
	if en == nil {
		return rc
	}
	return body(en)
}

// onBatch is onEngine for an export on batch b of the engine: a handle
// that names no live batch of it is refused as en.batch says.
func onBatch(h C.ferry_engine_t, b C.ferry_batch_t, what string, body func(en *engine, id host.BatchID) C.int) C.int {
	return onEngine(h, what, func(en *engine) C.int {
		id, rc := en.batch(b, what)
		if rc != C.FERRY_OK {
			return rc
		}
		return body(en, id)
	})
}

// result is an export's code for err, what host returned: FERRY_OK for
// nil, else as failErr.
func result(what string, err error, fallback C.int) C.int {
	if err != nil {
		return failErr(what, err, fallback)
	}
	return C.FERRY_OK
}

// lookup returns the engine of handle h, or the code and message of why
// there is none.
func lookup(h C.ferry_engine_t, what string) (*engine, C.int) {
	engines.RLock()
	en, next := engines.m[uint64(h)], engines.next
	engines.RUnlock()
	switch {
	case en != nil:
		return en, C.FERRY_OK
	case h == 0:
		return nil, fail(C.FERRY_ERR_INVALID, "%s: engine handle 0 is none; pass the handle ferry_create_engine_* returned", what)
	case uint64(h) <= next:
		return nil, fail(C.FERRY_ERR_CLOSED, "%s: engine %d was destroyed (ferry_destroy_engine); create a new one", what, uint64(h))
	}
	return nil, fail(C.FERRY_ERR_INVALID, "%s: unknown engine handle %d; pass the handle ferry_create_engine_* returned", what, uint64(h))
}

// handle returns a new batch or block-list handle of en. Called with
// en.mu held.
func (en *engine) handle() uint64 {
	en.next++
	return en.next
}

// keep stores v in m (one of en's handle tables) under a new handle, and
// returns it.
func keep[T any](en *engine, m map[uint64]T, v T) uint64 {
	en.mu.Lock()
	defer en.mu.Unlock()
	h := en.handle()
	m[h] = v
	return h
}

// batch returns the batch of handle b.
func (en *engine) batch(b C.ferry_batch_t, what string) (host.BatchID, C.int) {
	en.mu.Lock()
	id, ok := en.batches[uint64(b)]
	next := en.next
	en.mu.Unlock()
	switch {
	case ok:
		return id, C.FERRY_OK
	case b == 0:
		return id, fail(C.FERRY_ERR_INVALID, "%s: batch handle 0 is none; pass the handle ferry_allocate_batch returned", what)
	case uint64(b) <= next:
		return id, fail(C.FERRY_ERR_INVALID, "%s: batch %d of engine %d was freed or is not a batch (ferry_free_batch); allocate another", what, uint64(b), en.h)
	}
	return id, fail(C.FERRY_ERR_INVALID, "%s: unknown batch handle %d of engine %d", what, uint64(b), en.h)
}

// list returns the block list of handle l.
func (en *engine) list(l C.ferry_blocks_t, what string) (*host.BlockList, C.int) {
	en.mu.Lock()
	bl, ok := en.blocks[uint64(l)]
	next := en.next
	en.mu.Unlock()
	switch {
	case ok:
		return bl, C.FERRY_OK
	case l == 0:
		return nil, fail(C.FERRY_ERR_INVALID, "%s: block list handle 0 is none; pass the handle ferry_prepare_blocks returned", what)
	case uint64(l) <= next:
		return nil, fail(C.FERRY_ERR_INVALID, "%s: block list %d of engine %d was freed or is not a block list (ferry_free_blocks); prepare another", what, uint64(l), en.h)
	}
	return nil, fail(C.FERRY_ERR_INVALID, "%s: unknown block list handle %d of engine %d", what, uint64(l), en.h)
}

// putString writes s NUL-terminated into buf of cap bytes.
func putString(what, s string, buf *C.char, capacity C.size_t, n *C.size_t) C.int {
	if n != nil {
		*n = C.size_t(len(s))
	}
	if buf == nil {
		return fail(C.FERRY_ERR_INVALID, "%s: buf is NULL; pass a buffer of at least %d bytes", what, len(s)+1)
	}
	if uint64(capacity) < uint64(len(s))+1 {
		return fail(C.FERRY_ERR_TOO_SMALL, "%s: the buffer holds %d bytes; %d are needed (with the NUL)", what, uint64(capacity), len(s)+1)
	}
	if err := span("buf and cap", unsafe.Pointer(buf), uint64(capacity), 1); err != nil {
		return fail(C.FERRY_ERR_INVALID, "%s: %v", what, err)
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), len(s)+1)
	copy(dst, s)
	dst[len(s)] = 0
	return C.FERRY_OK
}

// cString returns s in C memory, for the caller to free.
func cString(s string) *C.char { return C.CString(s) }

var version = sync.OnceValue(func() *C.char {
	v := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		v = bi.Main.Version
	}
	s := fmt.Sprintf("ferry %s abi %d", v, C.FERRY_ABI_VERSION)
	if revision != "" {
		s += " revision " + revision
	}
	return C.CString(s) // never freed: ferry_version's string is static
})

//export ferry_go_version
func ferry_go_version() (s *C.char) {
	defer func() {
		if recover() != nil {
			s = nil
		}
	}()
	return version()
}
