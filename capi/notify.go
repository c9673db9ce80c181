package main

/*
#include <stdlib.h>
#include "ferry.h"
*/
import "C"

import (
	"context"
	"fmt"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/control"
)

//export ferry_go_send_notif
func ferry_go_send_notif(h C.ferry_engine_t, seg C.ferry_segment_t, name *C.char, msg unsafe.Pointer, msgLen C.size_t) C.int {
	const what = "ferry_send_notif"
	return onEngine(h, what, func(en *engine) C.int {
		if name == nil || *name == 0 {
			return fail(C.FERRY_ERR_INVALID, "%s: name is NULL or empty; a notification needs a name of 1 to 255 bytes", what)
		}
		m, err := message(msg, msgLen)
		if err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was sent", what, err)
		}
		return result(what, en.e.Notify(context.Background(), host.SegmentID(seg), C.GoString(name), m), C.FERRY_ERR_UNAVAILABLE)
	})
}

// message copies a notification's msg of msgLen bytes, checked first: a
// length over the cap a notification may carry, or a range that runs
// past the end of the address space, is refused before it is read.
func message(msg unsafe.Pointer, msgLen C.size_t) ([]byte, error) {
	switch {
	case msgLen == 0:
		return nil, nil
	case msg == nil:
		return nil, fmt.Errorf("msg is NULL with msg_len %d", uint64(msgLen))
	case uint64(msgLen) > control.MaxMessage:
		return nil, fmt.Errorf("msg_len %d is over the %d bytes a notification carries", uint64(msgLen), control.MaxMessage)
	}
	if err := span("msg and msg_len", msg, uint64(msgLen), 1); err != nil {
		return nil, err
	}
	return C.GoBytes(msg, C.int(msgLen)), nil
}

// cBytes returns b in C memory, NUL-terminated past its length.
func cBytes(b []byte) *C.uint8_t {
	p := (*C.uint8_t)(C.malloc(C.size_t(len(b) + 1)))
	d := unsafe.Slice((*byte)(unsafe.Pointer(p)), len(b)+1)
	copy(d, b)
	d[len(b)] = 0
	return p
}

//export ferry_go_recv_notifs
func ferry_go_recv_notifs(h C.ferry_engine_t, max C.size_t, timeout C.int64_t, out **C.ferry_notif_list_t) C.int {
	const what = "ferry_recv_notifs"
	return onEngine(h, what, func(en *engine) C.int {
		switch {
		case out == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: out is NULL", what)
		case max == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: max is 0; take at least one", what)
		}
		*out = nil
		ch := en.e.Notifications()
		var got []host.Notification
		if timeout > 0 {
			t := time.NewTimer(time.Duration(timeout))
			select {
			case n := <-ch:
				got = append(got, n)
			case <-t.C:
			}
			t.Stop()
		}
	drain:
		for uint64(len(got)) < uint64(max) {
			select {
			case n := <-ch:
				got = append(got, n)
			default:
				break drain
			}
		}
		if len(got) == 0 {
			return C.FERRY_ERR_AGAIN
		}
		l := (*C.ferry_notif_list_t)(C.calloc(1, C.sizeof_ferry_notif_list_t))
		l.notifs = (*C.ferry_notif_t)(C.calloc(C.size_t(len(got)), C.sizeof_ferry_notif_t))
		l.count = C.size_t(len(got))
		ns := unsafe.Slice(l.notifs, len(got))
		for i, n := range got {
			ns[i] = C.ferry_notif_t{from: cString(n.From), name: cString(n.Name), msg: cBytes(n.Msg), msg_len: C.size_t(len(n.Msg))}
		}
		*out = l
		return C.FERRY_OK
	})
}
