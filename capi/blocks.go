package main

/*
#include <stdlib.h>
#include "ferry.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/ferrydev/ferry/host"
)

func layout(l *C.ferry_block_layout_t) (host.BlockLayout, error) {
	if l.blocks > math.MaxInt32 || l.layers > math.MaxInt32 {
		return host.BlockLayout{}, fmt.Errorf("%d blocks of %d layers is more than a layout holds", uint64(l.blocks), uint64(l.layers))
	}
	return host.BlockLayout{BlockSize: uint64(l.block_size), Blocks: int(l.blocks), Stride: uint64(l.stride),
		Layers: int(l.layers), LayerStride: uint64(l.layer_stride)}, nil
}

//export ferry_go_prepare_blocks
func ferry_go_prepare_blocks(h C.ferry_engine_t, seg C.ferry_segment_t, local unsafe.Pointer, localLen C.size_t, ll *C.ferry_block_layout_t, remote C.uint64_t, rl *C.ferry_block_layout_t, out *C.ferry_blocks_t) C.int {
	const what = "ferry_prepare_blocks"
	return onEngine(h, what, func(en *engine) C.int {
		switch {
		case local == nil || localLen == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: local_base is NULL or local_len 0; give the registered memory the local layout lies in", what)
		case ll == nil || rl == nil || out == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: the layouts and out must not be NULL", what)
		}
		if err := span("local_base and local_len", local, uint64(localLen), 1); err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: %v", what, err)
		}
		l, err := layout(ll)
		if err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: local layout: %v", what, err)
		}
		r, err := layout(rl)
		if err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: remote layout: %v", what, err)
		}
		bl, err := en.e.PrepareBlocks(host.SegmentID(seg), bytesAt(local, uint64(localLen)), l, uint64(remote), r)
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_INVALID)
		}
		*out = C.ferry_blocks_t(keep(en, en.blocks, bl))
		return C.FERRY_OK
	})
}

//export ferry_go_free_blocks
func ferry_go_free_blocks(h C.ferry_engine_t, l C.ferry_blocks_t) C.int {
	const what = "ferry_free_blocks"
	return onEngine(h, what, func(en *engine) C.int {
		if _, rc := en.list(l, what); rc != C.FERRY_OK {
			return rc
		}
		en.mu.Lock()
		delete(en.blocks, uint64(l))
		en.mu.Unlock()
		return C.FERRY_OK
	})
}

func blockRequest(r *C.ferry_block_request_t) (host.BlockRequest, error) {
	o, err := op(r.opcode)
	if err != nil {
		return host.BlockRequest{}, err
	}
	p, err := priority(r.priority)
	if err != nil {
		return host.BlockRequest{}, err
	}
	in, err := intent(r.intent)
	if err != nil {
		return host.BlockRequest{}, err
	}
	return host.BlockRequest{Op: o, Priority: p, Deadline: deadline(r.deadline_ns), Transport: goString(r.transport_hint),
		Policy: goString(r.policy_name), Intent: in, NoMerge: r.no_merge != 0}, nil
}

//export ferry_go_submit_blocks
func ferry_go_submit_blocks(h C.ferry_engine_t, b C.ferry_batch_t, l C.ferry_blocks_t, req *C.ferry_block_request_t, li, ri *C.uint32_t, n C.size_t, lfirst, rfirst C.uint32_t, isRange C.int, first, count *C.size_t) C.int {
	what := "ferry_submit_blocks"
	if isRange != 0 {
		what = "ferry_submit_block_range"
	}
	return onBatch(h, b, what, func(en *engine, id host.BatchID) C.int {
		bl, rc := en.list(l, what)
		switch {
		case rc != C.FERRY_OK:
			return rc
		case req == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: req is NULL", what)
		case n == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: n is 0; submit at least one block", what)
		case isRange == 0 && (li == nil || ri == nil):
			return fail(C.FERRY_ERR_INVALID, "%s: local_idx and remote_idx must not be NULL", what)
		}
		if isRange == 0 {
			for _, a := range []struct {
				name string
				p    *C.uint32_t
			}{{"local_idx", li}, {"remote_idx", ri}} {
				if err := elems(a.name, unsafe.Pointer(a.p), uint64(n), 4); err != nil {
					return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was submitted", what, err)
				}
			}
		} else if uint64(n) > maxElems {
			return fail(C.FERRY_ERR_INVALID, "%s: n %d, over the limit of %d blocks per call; split the call", what, uint64(n), maxElems)
		}
		br, err := blockRequest(req)
		if err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was submitted", what, err)
		}
		var t host.BlockTasks
		if isRange != 0 {
			t, err = en.e.SubmitBlockRange(id, bl, br, uint32(lfirst), uint32(rfirst), int(n))
		} else {
			ls, rs := unsafe.Slice(li, int(n)), unsafe.Slice(ri, int(n))
			pairs := make([]host.BlockPair, n)
			for k := range pairs {
				pairs[k] = host.BlockPair{Local: uint32(ls[k]), Remote: uint32(rs[k])}
			}
			t, err = en.e.SubmitBlocks(id, bl, br, pairs)
		}
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_INVALID)
		}
		if first != nil {
			*first = C.size_t(t.First)
		}
		if count != nil {
			*count = C.size_t(t.Count)
		}
		return C.FERRY_OK
	})
}
