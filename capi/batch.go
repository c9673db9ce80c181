package main

/*
#include <stdlib.h>
#include "ferry.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// op maps ferry_opcode.
func op(o C.int32_t) (host.Op, error) {
	switch o {
	case C.FERRY_READ:
		return host.Read, nil
	case C.FERRY_WRITE:
		return host.Write, nil
	}
	return 0, fmt.Errorf("unknown opcode %d; use FERRY_READ or FERRY_WRITE", int(o))
}

// priority maps TENT's numbering (HIGH=0, MEDIUM=1, LOW=2) to host's;
// MEDIUM is host's normal priority.
func priority(p C.int32_t) (host.Priority, error) {
	switch p {
	case C.FERRY_PRIORITY_HIGH:
		return host.PriorityHigh, nil
	case C.FERRY_PRIORITY_MEDIUM:
		return host.PriorityNormal, nil
	case C.FERRY_PRIORITY_LOW:
		return host.PriorityLow, nil
	}
	return 0, fmt.Errorf("unknown priority %d; use FERRY_PRIORITY_HIGH (0), _MEDIUM (1) or _LOW (2)", int(p))
}

func deadline(ns C.int64_t) time.Time {
	if ns <= 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(ns))
}

// interned holds the strings requests name (transport hints, policies,
// intents): a handful, the same on every request, so that converting one
// allocates nothing after its first time.
var interned struct {
	sync.RWMutex
	m map[string]string
}

// maxInterned bounds interned; past it strings are converted each time.
const maxInterned = 1024

// goString returns the NUL-terminated s, "" for NULL.
func goString(s *C.char) string {
	if s == nil || *s == 0 {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(s), n)) != 0 {
		n++
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(s)), n)
	interned.RLock()
	v, ok := interned.m[string(b)] // no allocation: the compiler looks up without converting
	interned.RUnlock()
	if ok {
		return v
	}
	v = string(b)
	interned.Lock()
	if interned.m == nil {
		interned.m = make(map[string]string)
	}
	if len(interned.m) < maxInterned {
		interned.m[v] = v
	}
	interned.Unlock()
	return v
}

func intent(s *C.char) (host.Intent, error) {
	if s == nil || *s == 0 {
		return "", nil
	}
	return config.ParseIntent(goString(s))
}

// reqPool recycles the request slices a submission converts into: host
// copies each request, so the slice is free once Submit returns.
var reqPool = sync.Pool{New: func() any { return new([]host.Request) }}

// putRequests returns a slice from requests to the pool.
func putRequests(p *[]host.Request) {
	clear(*p)
	*p = (*p)[:0]
	reqPool.Put(p)
}

// request converts one C request.
func request(r *C.ferry_request_t, out *host.Request) error {
	o, err := op(r.opcode)
	if err != nil {
		return err
	}
	p, err := priority(r.priority)
	if err != nil {
		return err
	}
	switch {
	case r.source == nil:
		return errors.New("source is NULL; give local registered memory")
	case r.length == 0:
		return errors.New("length 0; a request moves at least one byte")
	}
	if err := span("source and length", r.source, uint64(r.length), 1); err != nil {
		return err
	}
	in, err := intent(r.intent)
	if err != nil {
		return err
	}
	*out = host.Request{Op: o, Priority: p, Local: bytesAt(r.source, uint64(r.length)), Segment: host.SegmentID(r.target_id),
		Remote: uint64(r.target_offset), Deadline: deadline(r.deadline_ns), Transport: goString(r.transport_hint),
		Policy: goString(r.policy_name), Intent: in}
	return nil
}

// requests converts n C requests into a pooled slice, for putRequests;
// code is FERRY_OK or the failure's.
func requests(what string, reqs *C.ferry_request_t, n C.size_t) (*[]host.Request, C.int) {
	switch {
	case reqs == nil:
		return nil, fail(C.FERRY_ERR_INVALID, "%s: reqs is NULL", what)
	case n == 0:
		return nil, fail(C.FERRY_ERR_INVALID, "%s: n is 0; submit at least one request", what)
	}
	if err := elems("reqs", unsafe.Pointer(reqs), uint64(n), C.sizeof_ferry_request_t); err != nil {
		return nil, fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was submitted", what, err)
	}
	cs := unsafe.Slice(reqs, int(n))
	p := reqPool.Get().(*[]host.Request)
	*p = slices.Grow((*p)[:0], int(n))[:n]
	out := *p
	for i := range cs {
		if err := request(&cs[i], &out[i]); err != nil {
			putRequests(p)
			return nil, fail(C.FERRY_ERR_INVALID, "%s: request %d: %v; nothing was submitted", what, i, err)
		}
	}
	return p, C.FERRY_OK
}

//export ferry_go_allocate_batch
func ferry_go_allocate_batch(h C.ferry_engine_t, capacity C.size_t, out *C.ferry_batch_t) C.int {
	const what = "ferry_allocate_batch"
	return onEngine(h, what, func(en *engine) C.int {
		switch {
		case out == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: out is NULL", what)
		case capacity == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: capacity 0; a batch holds at least one task", what)
		case uint64(capacity) > maxElems:
			return fail(C.FERRY_ERR_INVALID, "%s: capacity %d, over the limit of %d tasks; allocate smaller batches", what, uint64(capacity), maxElems)
		}
		id, err := en.e.AllocateBatch(int(capacity))
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_INVALID)
		}
		*out = C.ferry_batch_t(keep(en, en.batches, id))
		return C.FERRY_OK
	})
}

//export ferry_go_free_batch
func ferry_go_free_batch(h C.ferry_engine_t, b C.ferry_batch_t) C.int {
	const what = "ferry_free_batch"
	return onBatch(h, b, what, func(en *engine, id host.BatchID) C.int {
		en.mu.Lock()
		delete(en.batches, uint64(b))
		en.mu.Unlock()
		return result(what, en.e.FreeBatch(id), C.FERRY_ERR_INVALID)
	})
}

//export ferry_go_submit
func ferry_go_submit(h C.ferry_engine_t, b C.ferry_batch_t, reqs *C.ferry_request_t, n C.size_t, name *C.char, msg unsafe.Pointer, msgLen C.size_t) C.int {
	what := "ferry_submit"
	if name != nil {
		what = "ferry_submit_notif"
	}
	return onBatch(h, b, what, func(en *engine, id host.BatchID) C.int {
		var m []byte
		if name != nil {
			var err error
			if m, err = message(msg, msgLen); err != nil {
				return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was submitted", what, err)
			}
		}
		p, rc := requests(what, reqs, n)
		if rc != C.FERRY_OK {
			return rc
		}
		defer putRequests(p)
		var err error
		if name == nil {
			err = en.e.Submit(id, *p...)
		} else {
			err = en.e.SubmitWithNotify(id, host.Notification{Name: C.GoString(name), Msg: m}, *p...)
		}
		return result(what, err, C.FERRY_ERR_INVALID)
	})
}

// taskStatus fills out from st; it returns the task's message, "" when
// it has none.
func taskStatus(st host.TaskStatus, out *C.ferry_task_status_t) string {
	*out = C.ferry_task_status_t{state: C.int32_t(st.State), transferred_bytes: C.uint64_t(st.Bytes), attempts: C.int32_t(st.Attempts)}
	if st.Err == nil {
		if st.State != host.StatePending && st.State != host.StateCompleted {
			out.error = C.FERRY_ERR_PLUGIN_FAILED
		}
		return ""
	}
	out.error = codeOf(st.Err, C.FERRY_ERR_PLUGIN_FAILED)
	return st.Err.Error()
}

//export ferry_go_task_status
func ferry_go_task_status(h C.ferry_engine_t, b C.ferry_batch_t, task C.size_t, out *C.ferry_task_status_t) C.int {
	const what = "ferry_task_status"
	return onBatch(h, b, what, func(en *engine, id host.BatchID) C.int {
		if out == nil {
			return fail(C.FERRY_ERR_INVALID, "%s: out is NULL", what)
		}
		st, err := en.e.TaskStatus(id, int(task))
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_INVALID)
		}
		if m := taskStatus(st, out); m != "" {
			setError(fmt.Sprintf("%s: task %d: %s", what, uint64(task), m))
		}
		return C.FERRY_OK
	})
}

//export ferry_go_task_status_list
func ferry_go_task_status_list(h C.ferry_engine_t, b C.ferry_batch_t, first C.size_t, out *C.ferry_task_status_t, capacity C.size_t, filled *C.size_t) C.int {
	const what = "ferry_task_status_list"
	return onBatch(h, b, what, func(en *engine, id host.BatchID) C.int {
		switch {
		case out == nil || filled == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: out and filled must not be NULL", what)
		case capacity == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: cap is 0", what)
		case uint64(first) > math.MaxInt32:
			return fail(C.FERRY_ERR_INVALID, "%s: first task %d is past any batch; pass a task index of the batch", what, uint64(first))
		}
		if err := span("out and cap", unsafe.Pointer(out), uint64(capacity), C.sizeof_ferry_task_status_t); err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: %v", what, err)
		}
		// A batch never holds more than maxElems tasks: a larger cap is
		// room that stays unfilled, not memory to allocate here.
		sts := make([]host.TaskStatus, min(uint64(capacity), maxElems))
		k, err := en.e.TaskStatusList(id, int(first), sts)
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_INVALID)
		}
		cs := unsafe.Slice(out, len(sts))
		for i := range k {
			taskStatus(sts[i], &cs[i])
		}
		*filled = C.size_t(k)
		return C.FERRY_OK
	})
}

//export ferry_go_batch_status
func ferry_go_batch_status(h C.ferry_engine_t, b C.ferry_batch_t, out *C.ferry_batch_status_t) C.int {
	const what = "ferry_batch_status"
	return onBatch(h, b, what, func(en *engine, id host.BatchID) C.int {
		if out == nil {
			return fail(C.FERRY_ERR_INVALID, "%s: out is NULL", what)
		}
		s, err := en.e.BatchStatus(id)
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_INVALID)
		}
		*out = C.ferry_batch_status_t{tasks: C.uint64_t(s.Tasks), pending: C.uint64_t(s.Pending), completed: C.uint64_t(s.Completed),
			failed: C.uint64_t(s.Failed), transferred_bytes: C.uint64_t(s.Bytes)}
		return C.FERRY_OK
	})
}

//export ferry_go_cancel
func ferry_go_cancel(h C.ferry_engine_t, b C.ferry_batch_t, task C.size_t, all C.int) C.int {
	what := "ferry_cancel_task"
	if all != 0 {
		what = "ferry_cancel_batch"
	}
	return onBatch(h, b, what, func(en *engine, id host.BatchID) C.int {
		var err error
		if all != 0 {
			err = en.e.Cancel(id)
		} else {
			err = en.e.CancelTask(id, int(task))
		}
		return result(what, err, C.FERRY_ERR_INVALID)
	})
}

//export ferry_go_wait
func ferry_go_wait(h C.ferry_engine_t, b C.ferry_batch_t, timeout C.int64_t) C.int {
	const what = "ferry_wait"
	return onBatch(h, b, what, func(en *engine, id host.BatchID) C.int {
		ctx := context.Background()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, time.Duration(timeout))
			defer cancel()
		}
		return result(what, en.e.Wait(ctx, id), C.FERRY_ERR_INVALID)
	})
}

//export ferry_go_transfer
func ferry_go_transfer(h C.ferry_engine_t, reqs *C.ferry_request_t, n C.size_t) C.int {
	const what = "ferry_transfer"
	return onEngine(h, what, func(en *engine) C.int {
		p, rc := requests(what, reqs, n)
		if rc != C.FERRY_OK {
			return rc
		}
		defer putRequests(p)
		return result(what, en.e.Transfer(context.Background(), *p...), C.FERRY_ERR_PLUGIN_FAILED)
	})
}
