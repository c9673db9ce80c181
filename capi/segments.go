package main

/*
#include <stdlib.h>
#include <string.h>
#include "ferry.h"
*/
import "C"

import (
	"context"
	"math"
	"unsafe"

	"github.com/ferrydev/ferry/host"
)

//export ferry_go_open_segment
func ferry_go_open_segment(h C.ferry_engine_t, name *C.char, out *C.ferry_segment_t) C.int {
	const what = "ferry_open_segment"
	return onEngine(h, what, func(en *engine) C.int {
		switch {
		case name == nil || *name == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: name is NULL or empty; give the peer engine's name", what)
		case out == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: out is NULL; give where to put the segment id", what)
		}
		seg, err := en.e.OpenSegment(context.Background(), C.GoString(name))
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_SEGMENT_NOT_FOUND)
		}
		*out = C.ferry_segment_t(seg.ID)
		return C.FERRY_OK
	})
}

//export ferry_go_close_segment
func ferry_go_close_segment(h C.ferry_engine_t, seg C.ferry_segment_t) C.int {
	const what = "ferry_close_segment"
	return onEngine(h, what, func(en *engine) C.int {
		return result(what, en.e.CloseSegment(context.Background(), host.SegmentID(seg)), C.FERRY_ERR_SEGMENT_NOT_FOUND)
	})
}

//export ferry_go_segment_info
func ferry_go_segment_info(h C.ferry_engine_t, seg C.ferry_segment_t, out **C.ferry_segment_info_t) C.int {
	const what = "ferry_segment_info"
	return onEngine(h, what, func(en *engine) C.int {
		if out == nil {
			return fail(C.FERRY_ERR_INVALID, "%s: out is NULL", what)
		}
		s, err := en.e.SegmentInfo(host.SegmentID(seg))
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_SEGMENT_NOT_FOUND)
		}
		info := (*C.ferry_segment_info_t)(C.calloc(1, C.sizeof_ferry_segment_info_t))
		info.id = C.ferry_segment_t(s.ID)
		info.incarnation = C.uint64_t(s.Incarnation)
		info.name = cString(s.Name)
		info.machine_id = cString(s.MachineID)
		info.num_buffers = C.size_t(len(s.Buffers))
		if len(s.Buffers) > 0 {
			info.buffers = (*C.ferry_buffer_info_t)(C.calloc(C.size_t(len(s.Buffers)), C.sizeof_ferry_buffer_info_t))
			bs := unsafe.Slice(info.buffers, len(s.Buffers))
			for i, b := range s.Buffers {
				bs[i] = C.ferry_buffer_info_t{base: C.uint64_t(b.Base), length: C.uint64_t(b.Length), perm: cPerm(b.Perm)}
				if b.Foreign {
					bs[i].foreign = 1
				}
			}
		}
		info.num_transports = C.size_t(len(s.Transports))
		if len(s.Transports) > 0 {
			info.transports = (**C.char)(C.calloc(C.size_t(len(s.Transports)), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
			ts := unsafe.Slice(info.transports, len(s.Transports))
			for i, t := range s.Transports {
				ts[i] = cString(t)
			}
		}
		*out = info
		return C.FERRY_OK
	})
}

//export ferry_go_export_segment
func ferry_go_export_segment(h C.ferry_engine_t, blob *unsafe.Pointer, n *C.size_t) C.int {
	const what = "ferry_export_segment"
	return onEngine(h, what, func(en *engine) C.int {
		if blob == nil || n == nil {
			return fail(C.FERRY_ERR_INVALID, "%s: blob and len must not be NULL", what)
		}
		b, err := en.e.ExportSegment()
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_INVALID)
		}
		p := C.malloc(C.size_t(max(len(b), 1)))
		copy(unsafe.Slice((*byte)(p), len(b)), b)
		*blob, *n = p, C.size_t(len(b))
		return C.FERRY_OK
	})
}

//export ferry_go_import_segment
func ferry_go_import_segment(h C.ferry_engine_t, blob unsafe.Pointer, n C.size_t, expect *C.char, out *C.ferry_segment_t) C.int {
	const what = "ferry_import_segment"
	return onEngine(h, what, func(en *engine) C.int {
		switch {
		case blob == nil || n == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: the blob is NULL or of length 0; pass what ferry_export_segment gave the peer", what)
		case out == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: out is NULL", what)
		case uint64(n) > math.MaxInt32:
			return fail(C.FERRY_ERR_INVALID, "%s: a blob of %d bytes is far over any segment's; pass what ferry_export_segment gave the peer", what, uint64(n))
		}
		if err := span("blob and len", blob, uint64(n), 1); err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: %v", what, err)
		}
		var opts []host.ImportOption
		if expect != nil {
			opts = append(opts, host.ExpectName(C.GoString(expect)))
		}
		seg, err := en.e.ImportSegment(context.Background(), C.GoBytes(blob, C.int(n)), opts...)
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_INVALID)
		}
		*out = C.ferry_segment_t(seg.ID)
		return C.FERRY_OK
	})
}
