package main

/*
#include "ferry.h"
*/
import "C"

import (
	"context"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/host"
)

// ferry_go_transfer_sync is ferry_transfer_sync: one synchronous request
// from scalar arguments, with no request struct to read or pool, for
// callers that pay per argument they fill (cffi, ctypes). It checks what
// ferry_transfer's conversion checks and runs the same Engine.Transfer.
//
//export ferry_go_transfer_sync
func ferry_go_transfer_sync(h C.ferry_engine_t, opcode C.int, seg C.ferry_segment_t, local unsafe.Pointer,
	remote C.uint64_t, length C.size_t, timeout C.int64_t, hint *C.char) C.int {
	const what = "ferry_transfer_sync"
	return onEngine(h, what, func(en *engine) C.int {
		o, err := op(C.int32_t(opcode))
		switch {
		case err != nil:
			return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was transferred", what, err)
		case local == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: local is NULL; give local registered memory", what)
		case length == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: length 0; a transfer moves at least one byte", what)
		case timeout < 0:
			return fail(C.FERRY_ERR_INVALID, "%s: timeout_ns %d is negative; give 0 for the engine's default deadline or a positive limit", what, int64(timeout))
		}
		if err := span("local and length", local, uint64(length), 1); err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was transferred", what, err)
		}
		r := host.Request{Op: o, Priority: host.PriorityNormal, Local: bytesAt(local, uint64(length)),
			Segment: host.SegmentID(seg), Remote: uint64(remote), Transport: goString(hint)}
		if timeout > 0 {
			r.Deadline = time.Now().Add(time.Duration(timeout))
		}
		return result(what, en.e.Transfer(context.Background(), r), C.FERRY_ERR_PLUGIN_FAILED)
	})
}
