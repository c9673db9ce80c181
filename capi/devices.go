package main

/*
#include "ferry.h"
*/
import "C"

import (
	"context"
	"unsafe"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/sdk"
)

// goHandle converts a ferry_device_handle_t, checking what C can get
// wrong: the type's NUL and data_len.
func goHandle(h *C.ferry_device_handle_t) (*sdk.Handle, string) {
	typ := unsafe.Slice((*byte)(unsafe.Pointer(&h._type[0])), len(h._type))
	n := 0
	for n < len(typ) && typ[n] != 0 {
		n++
	}
	switch {
	case n == 0:
		return nil, "handle->type is empty; name the handle's type (\"cuda-ipc\", \"cuda-fd\", \"hip-ipc\", \"sim\")"
	case n == len(typ):
		return nil, "handle->type is not NUL-terminated within its 16 bytes"
	case h.data_len == 0 || h.data_len > C.FERRY_DEVICE_HANDLE_MAX:
		return nil, "handle->data_len must be 1 to FERRY_DEVICE_HANDLE_MAX (128)"
	}
	data := unsafe.Slice((*byte)(unsafe.Pointer(&h.data[0])), int(h.data_len))
	return &sdk.Handle{
		Type:   sdk.HandleType(typ[:n]),
		Device: int(h.device),
		Data:   append([]byte(nil), data...),
		Size:   uint64(h.size),
		Offset: uint64(h.offset),
		Length: uint64(h.length),
	}, ""
}

// putHandle writes h into out; false when it does not fit the struct.
func putHandle(h sdk.Handle, out *C.ferry_device_handle_t) bool {
	typ := unsafe.Slice((*byte)(unsafe.Pointer(&out._type[0])), len(out._type))
	if len(h.Type) >= len(typ) || len(h.Data) > C.FERRY_DEVICE_HANDLE_MAX {
		return false
	}
	clear(typ)
	copy(typ, h.Type)
	out.device = C.int32_t(h.Device)
	out.data_len = C.uint32_t(len(h.Data))
	data := unsafe.Slice((*byte)(unsafe.Pointer(&out.data[0])), len(out.data))
	clear(data)
	copy(data, h.Data)
	out.size, out.offset, out.length = C.uint64_t(h.Size), C.uint64_t(h.Offset), C.uint64_t(h.Length)
	return true
}

// The device address arrives as a number (the C wrapper casts ptr), never
// as a Go pointer: it is another address space's.

//export ferry_go_register_device
func ferry_go_register_device(h C.ferry_engine_t, ptr C.uint64_t, n C.size_t, kind *C.char, pm C.int,
	handle *C.ferry_device_handle_t, base *C.uint64_t) C.int {
	const what = "ferry_register_device"
	return onEngine(h, what, func(en *engine) C.int {
		hp, ok := perm(pm)
		switch {
		case ptr == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: ptr is NULL; pass the device address to register", what)
		case n == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: length 0 at 0x%x; register at least one byte", what, uint64(ptr))
		case !ok:
			return fail(C.FERRY_ERR_INVALID, "%s: unknown permission %d; use FERRY_PERM_LOCAL, _REMOTE_READ or _REMOTE_READ_WRITE", what, int(pm))
		case uint64(ptr)+uint64(n) < uint64(ptr):
			return fail(C.FERRY_ERR_INVALID, "%s: %d bytes from 0x%x run past the end of the address space; nothing was registered", what, uint64(n), uint64(ptr))
		}
		b := host.DeviceBuffer{Addr: uint64(ptr), Length: uint64(n), Kind: goString(kind)}
		if handle != nil {
			var msg string
			if b.Handle, msg = goHandle(handle); b.Handle == nil {
				return fail(C.FERRY_ERR_INVALID, "%s: %s; nothing was registered", what, msg)
			}
			if b.Handle.Length != uint64(n) {
				return fail(C.FERRY_ERR_INVALID, "%s: handle->length is %d but len is %d; export exactly the registered range", what, b.Handle.Length, uint64(n))
			}
		}
		a, err := en.e.RegisterDevice(context.Background(), b, hp)
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_PLUGIN_FAILED)
		}
		if base != nil {
			*base = C.uint64_t(a)
		}
		return C.FERRY_OK
	})
}

//export ferry_go_unregister_device
func ferry_go_unregister_device(h C.ferry_engine_t, ptr C.uint64_t) C.int {
	const what = "ferry_unregister_device"
	return onEngine(h, what, func(en *engine) C.int {
		if ptr == 0 {
			return fail(C.FERRY_ERR_INVALID, "%s: ptr is NULL; pass the start of a registered device range", what)
		}
		return result(what, en.e.UnregisterDevice(context.Background(), uint64(ptr)), C.FERRY_ERR_PLUGIN_FAILED)
	})
}

//export ferry_go_allocate_device
func ferry_go_allocate_device(h C.ferry_engine_t, kind *C.char, size C.size_t, out *C.ferry_device_memory_t) C.int {
	const what = "ferry_allocate_device"
	return onEngine(h, what, func(en *engine) C.int {
		switch {
		case out == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: out is NULL; give where to put the device memory", what)
		case kind == nil || *kind == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: kind is NULL or empty; name it (\"cuda\", \"cuda:0\", \"rocm:1\")", what)
		case size == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: size 0; allocate at least one byte", what)
		}
		ctx := context.Background()
		m, err := en.e.AllocateDevice(ctx, goString(kind), uint64(size))
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_PLUGIN_FAILED)
		}
		var mo C.ferry_device_memory_t
		k := unsafe.Slice((*byte)(unsafe.Pointer(&mo.kind[0])), len(mo.kind))
		if len(m.Kind) >= len(k) || !putHandle(m.Handle, &mo.handle) {
			_ = en.e.FreeDevice(ctx, m)
			return fail(C.FERRY_ERR_INTERNAL, "%s: the device plugin's kind %q or handle (%s, %d bytes) does not fit ferry_device_memory_t; nothing was allocated", what, m.Kind, m.Handle.Type, len(m.Handle.Data))
		}
		copy(k, m.Kind)
		mo.size = C.uint64_t(m.Size)
		en.mu.Lock()
		en.devAllocs[m.Addr] = m
		en.mu.Unlock()
		*out = mo
		// Set in C memory, as a number: a device address in a Go
		// variable's pointer field could confuse the garbage collector.
		*(*uint64)(unsafe.Pointer(&out.addr)) = m.Addr
		return C.FERRY_OK
	})
}

//export ferry_go_free_device
func ferry_go_free_device(h C.ferry_engine_t, addr C.uint64_t) C.int {
	const what = "ferry_free_device"
	return onEngine(h, what, func(en *engine) C.int {
		en.mu.Lock()
		m, ok := en.devAllocs[uint64(addr)]
		delete(en.devAllocs, uint64(addr))
		en.mu.Unlock()
		if !ok {
			return fail(C.FERRY_ERR_INVALID, "%s: 0x%x is not an address ferry_allocate_device returned on engine %d (or it was freed)", what, uint64(addr), en.h)
		}
		return result(what, en.e.FreeDevice(context.Background(), m), C.FERRY_ERR_PLUGIN_FAILED)
	})
}
