package main

/*
#include <stdlib.h>
#include "ferry.h"
*/
import "C"

import (
	"context"
	"fmt"
	"math"
	"os"
	"unsafe"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/sdk/kit"
)

// textConfigName names configuration text in its errors; relative paths
// in it are taken from the current directory.
const textConfigName = "<config text>"

// logEnv names the environment variable that sets the engine's log
// level: trace, debug, info, warn (the default), error or off.
const logEnv = "FERRY_LOG_LEVEL"

// getenv reads the process environment as it is now, through C: Go's
// os.Getenv in a shared library sees only the environment the process
// started with, so a variable an embedder set later (Python's os.environ,
// C's setenv) would be missed.
func getenv(name string) string {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	if v := C.getenv(cs); v != nil {
		return C.GoString(v)
	}
	return ""
}

// logger returns the engine's logger: to stderr at $FERRY_LOG_LEVEL.
func logger() (hclog.Logger, error) {
	level := hclog.Warn
	if v := getenv(logEnv); v != "" {
		if level = hclog.LevelFromString(v); level == hclog.NoLevel {
			return nil, fmt.Errorf("%w: $%s is %q; use trace, debug, info, warn, error or off", host.ErrInvalid, logEnv, v)
		}
	}
	return hclog.New(&hclog.LoggerOptions{Name: "ferry", Level: level, Output: os.Stderr}), nil
}

func create(what string, cfg *config.Config, out *C.ferry_engine_t) C.int {
	if cfg.PluginDir == "" {
		// As the loader would read $FERRY_PLUGIN_DIR, but as it is now.
		cfg.PluginDir = getenv(loader.DirEnv)
	}
	if cfg.PluginDir == "" {
		cfg.PluginDir = pluginsBeside()
	}
	log, err := logger()
	if err != nil {
		return failErr(what, err, C.FERRY_ERR_INVALID)
	}
	e, err := host.New(context.Background(), cfg, host.WithLogger(log), host.WithLockedCallers())
	if err != nil {
		return failErr(what, err, C.FERRY_ERR_UNAVAILABLE)
	}
	engines.Lock()
	if engines.m == nil {
		engines.m = make(map[uint64]*engine)
	}
	engines.next++
	en := &engine{h: engines.next, e: e, allocs: make(map[uintptr][]byte), devAllocs: make(map[uint64]host.DeviceMemory), batches: make(map[uint64]host.BatchID), blocks: make(map[uint64]*host.BlockList)}
	engines.m[en.h] = en
	engines.Unlock()
	*out = C.ferry_engine_t(en.h)
	return C.FERRY_OK
}

//export ferry_go_create_engine_from_file
func ferry_go_create_engine_from_file(path *C.char, out *C.ferry_engine_t) (rc C.int) {
	const what = "ferry_create_engine_from_file"
	defer guard(&rc, what)
	switch {
	case path == nil:
		return fail(C.FERRY_ERR_INVALID, "%s: path is NULL; give the configuration file's path", what)
	case out == nil:
		return fail(C.FERRY_ERR_INVALID, "%s: out is NULL; give where to put the engine handle", what)
	case *path == 0:
		return fail(C.FERRY_ERR_INVALID, "%s: path is empty; give the configuration file's path", what)
	}
	cfg, err := config.Load(C.GoString(path))
	if err != nil {
		return failErr(what, err, C.FERRY_ERR_CONFIG)
	}
	return create(what, cfg, out)
}

//export ferry_go_create_engine_from_text
func ferry_go_create_engine_from_text(text *C.char, out *C.ferry_engine_t) (rc C.int) {
	const what = "ferry_create_engine_from_text"
	defer guard(&rc, what)
	switch {
	case text == nil:
		return fail(C.FERRY_ERR_INVALID, "%s: text is NULL; give the configuration's HCL text", what)
	case out == nil:
		return fail(C.FERRY_ERR_INVALID, "%s: out is NULL; give where to put the engine handle", what)
	case *text == 0:
		return fail(C.FERRY_ERR_INVALID, "%s: the configuration text is empty; it needs at least name = \"...\"", what)
	}
	cfg, err := config.Parse([]byte(C.GoString(text)), textConfigName)
	if err != nil {
		return failErr(what, err, C.FERRY_ERR_CONFIG)
	}
	return create(what, cfg, out)
}

//export ferry_go_create_engine_with_secret
func ferry_go_create_engine_with_secret(path, text *C.char, secret unsafe.Pointer, secretLen C.size_t, out *C.ferry_engine_t) (rc C.int) {
	const what = "ferry_create_engine_with_secret"
	defer guard(&rc, what)
	switch {
	case (path == nil) == (text == nil):
		return fail(C.FERRY_ERR_INVALID, "%s: give exactly one of path (a configuration file) and text (its HCL text); the other NULL", what)
	case out == nil:
		return fail(C.FERRY_ERR_INVALID, "%s: out is NULL; give where to put the engine handle", what)
	case secret == nil || secretLen < C.size_t(kit.MinSecretLen):
		return fail(C.FERRY_ERR_INVALID, "%s: the cluster secret is %d bytes; give at least %d (the same on every engine of the cluster)", what, secretLen, kit.MinSecretLen)
	case secretLen > 1<<16:
		return fail(C.FERRY_ERR_INVALID, "%s: the cluster secret is %d bytes; give at most 65536", what, secretLen)
	case path != nil && *path == 0:
		return fail(C.FERRY_ERR_INVALID, "%s: path is empty; give the configuration file's path", what)
	case text != nil && *text == 0:
		return fail(C.FERRY_ERR_INVALID, "%s: the configuration text is empty; it needs at least name = \"...\"", what)
	}
	var cfg *config.Config
	var err error
	if path != nil {
		cfg, err = config.Load(C.GoString(path))
	} else {
		cfg, err = config.Parse([]byte(C.GoString(text)), textConfigName)
	}
	if err != nil {
		return failErr(what, err, C.FERRY_ERR_CONFIG)
	}
	// This secret replaces the file's: the engine signs and authenticates
	// with it, and hands it to plugins whose blocks name none.
	cfg.ClusterSecretFile = ""
	cfg.ClusterSecret = C.GoBytes(secret, C.int(secretLen))
	return create(what, cfg, out)
}

//export ferry_go_destroy_engine
func ferry_go_destroy_engine(h C.ferry_engine_t) C.int {
	const what = "ferry_destroy_engine"
	return onEngine(h, what, func(en *engine) C.int {
		engines.Lock()
		_, live := engines.m[en.h]
		delete(engines.m, en.h)
		engines.Unlock()
		if !live {
			return fail(C.FERRY_ERR_CLOSED, "%s: engine %d was destroyed already", what, en.h)
		}
		err := en.e.Close()
		if metastore.Unreachable(err) {
			// Closed all the same: only the descriptor's key is left, to
			// expire with its lease. Not a failure of the engine.
			return fail(C.FERRY_ERR_UNAVAILABLE, "%s: engine %q is closed, but its metastore could not be reached to delete its descriptor, "+
				"which expires with its lease (a Mooncake metadata server keeps it until an engine of that name starts): %v", what, en.e.Name(), err)
		}
		return result(what, err, C.FERRY_ERR_PLUGIN_FAILED)
	})
}

//export ferry_go_engine_string
func ferry_go_engine_string(h C.ferry_engine_t, which C.int, buf *C.char, capacity C.size_t, n *C.size_t) C.int {
	what := "ferry_segment_name"
	switch which {
	case 1:
		what = "ferry_rpc_addr"
	case 2:
		what = "ferry_metastore_url"
	}
	return onEngine(h, what, func(en *engine) C.int {
		var s string
		switch which {
		case 0:
			s = en.e.Name()
		case 1:
			s = en.e.ControlAddr()
		default:
			s = en.e.MetastoreURL()
		}
		return putString(what, s, buf, capacity, n)
	})
}

// perm maps ferry_perm.
func perm(p C.int) (host.Perm, bool) {
	switch p {
	case C.FERRY_PERM_LOCAL:
		return host.LocalOnly, true
	case C.FERRY_PERM_REMOTE_READ:
		return host.RemoteRead, true
	case C.FERRY_PERM_REMOTE_READ_WRITE:
		return host.RemoteReadWrite, true
	}
	return 0, false
}

func cPerm(p host.Perm) C.int32_t {
	switch p {
	case host.RemoteRead:
		return C.FERRY_PERM_REMOTE_READ
	case host.RemoteReadWrite:
		return C.FERRY_PERM_REMOTE_READ_WRITE
	}
	return C.FERRY_PERM_LOCAL
}

// bytesAt is the n bytes at p: C memory, or Ferry's mapped memory; never
// Go memory, so that no Go pointer crosses the boundary.
func bytesAt(p unsafe.Pointer, n uint64) []byte { return unsafe.Slice((*byte)(p), int(n)) }

//export ferry_go_allocate
func ferry_go_allocate(h C.ferry_engine_t, size C.size_t, out *unsafe.Pointer) C.int {
	const what = "ferry_allocate"
	return onEngine(h, what, func(en *engine) C.int {
		switch {
		case out == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: out is NULL; give where to put the pointer", what)
		case size == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: size 0; allocate at least one byte", what)
		case uint64(size) > math.MaxInt64:
			return fail(C.FERRY_ERR_INVALID, "%s: size %d overflows the address space; allocate what you need", what, uint64(size))
		}
		b, err := en.e.Allocate(int(size))
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_INVALID)
		}
		p := unsafe.Pointer(unsafe.SliceData(b))
		en.mu.Lock()
		en.allocs[uintptr(p)] = b
		en.mu.Unlock()
		*out = p
		return C.FERRY_OK
	})
}

//export ferry_go_free
func ferry_go_free(h C.ferry_engine_t, p unsafe.Pointer) C.int {
	const what = "ferry_free"
	return onEngine(h, what, func(en *engine) C.int {
		if p == nil {
			return fail(C.FERRY_ERR_INVALID, "%s: ptr is NULL; pass a pointer ferry_allocate returned", what)
		}
		en.mu.Lock()
		b, ok := en.allocs[uintptr(p)]
		delete(en.allocs, uintptr(p))
		en.mu.Unlock()
		if !ok {
			return fail(C.FERRY_ERR_INVALID, "%s: %p is not a pointer ferry_allocate returned on engine %d (or it was freed); free other memory as you allocated it", what, p, en.h)
		}
		return result(what, en.e.Free(b), C.FERRY_ERR_INVALID)
	})
}

// ferryMemory reports whether [p, p+n) lies in memory from ferry_allocate.
func (en *engine) ferryMemory(p unsafe.Pointer, n uint64) bool {
	en.mu.Lock()
	defer en.mu.Unlock()
	for base, b := range en.allocs {
		if uintptr(p) >= base && uint64(uintptr(p)-base)+n <= uint64(len(b)) {
			return true
		}
	}
	return false
}

//export ferry_go_register
func ferry_go_register(h C.ferry_engine_t, p unsafe.Pointer, n C.size_t, pm C.int, remote *C.uint64_t) C.int {
	const what = "ferry_register"
	return onEngine(h, what, func(en *engine) C.int {
		hp, ok := perm(pm)
		switch {
		case p == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: ptr is NULL; pass the memory to register", what)
		case n == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: length 0 at %p; register at least one byte", what, p)
		case !ok:
			return fail(C.FERRY_ERR_INVALID, "%s: unknown permission %d; use FERRY_PERM_LOCAL, _REMOTE_READ or _REMOTE_READ_WRITE", what, int(pm))
		}
		if err := span("ptr and length", p, uint64(n), 1); err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was registered", what, err)
		}
		a, err := en.e.Register(context.Background(), bytesAt(p, uint64(n)), hp)
		if err != nil {
			return failErr(what, err, C.FERRY_ERR_PLUGIN_FAILED)
		}
		if remote != nil {
			*remote = C.uint64_t(a)
		}
		return C.FERRY_OK
	})
}

//export ferry_go_unregister
func ferry_go_unregister(h C.ferry_engine_t, p unsafe.Pointer) C.int {
	const what = "ferry_unregister"
	return onEngine(h, what, func(en *engine) C.int {
		if p == nil {
			return fail(C.FERRY_ERR_INVALID, "%s: ptr is NULL; pass the start of a registered buffer", what)
		}
		if err := span("ptr", p, 1, 1); err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was unregistered", what, err)
		}
		return result(what, en.e.Unregister(context.Background(), bytesAt(p, 1)), C.FERRY_ERR_PLUGIN_FAILED)
	})
}

//export ferry_go_register_batch
func ferry_go_register_batch(h C.ferry_engine_t, ptrs *unsafe.Pointer, lens *C.size_t, n C.size_t, perms *C.int, nperms C.size_t) C.int {
	const what = "ferry_register_batch"
	return onEngine(h, what, func(en *engine) C.int {
		switch {
		case ptrs == nil || lens == nil || perms == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: ptrs, lens and perms must not be NULL", what)
		case n == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: n is 0; register at least one buffer", what)
		case nperms != 1 && nperms != n:
			return fail(C.FERRY_ERR_INVALID, "%s: %d permissions for %d buffers; give one per buffer, or one for all", what, uint64(nperms), uint64(n))
		}
		for _, a := range []struct {
			name  string
			p     unsafe.Pointer
			n, sz uint64
		}{
			{"ptrs", unsafe.Pointer(ptrs), uint64(n), uint64(unsafe.Sizeof(*ptrs))},
			{"lens", unsafe.Pointer(lens), uint64(n), uint64(unsafe.Sizeof(*lens))},
			{"perms", unsafe.Pointer(perms), uint64(nperms), uint64(unsafe.Sizeof(*perms))},
		} {
			if err := elems(a.name, a.p, a.n, a.sz); err != nil {
				return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing of the batch was registered", what, err)
			}
		}
		ps := unsafe.Slice(ptrs, int(n))
		ls := unsafe.Slice(lens, int(n))
		cp := unsafe.Slice(perms, int(nperms))
		bufs := make([][]byte, n)
		hps := make([]host.Perm, nperms)
		foreign := false
		for i := range bufs {
			if ps[i] == nil || ls[i] == 0 {
				return fail(C.FERRY_ERR_INVALID, "%s: buffer %d is NULL or of length 0; nothing of the batch was registered", what, i)
			}
			if err := span(fmt.Sprintf("buffer %d", i), ps[i], uint64(ls[i]), 1); err != nil {
				return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing of the batch was registered", what, err)
			}
			bufs[i] = bytesAt(ps[i], uint64(ls[i]))
			foreign = foreign || !en.ferryMemory(ps[i], uint64(ls[i]))
		}
		for i := range hps {
			p, ok := perm(cp[i])
			if !ok {
				return fail(C.FERRY_ERR_INVALID, "%s: permission %d is unknown (%d); nothing of the batch was registered", what, i, int(cp[i]))
			}
			hps[i] = p
		}
		if !foreign {
			if _, err := en.e.RegisterBatch(context.Background(), bufs, hps); err != nil {
				return failErr(what, err, C.FERRY_ERR_PLUGIN_FAILED)
			}
			return C.FERRY_OK
		}
		// The host's batch takes Ferry memory only: register application
		// memory one by one, undoing the done ones on a refusal.
		ctx := context.Background()
		for i, b := range bufs {
			if _, err := en.e.Register(ctx, b, hps[min(i, len(hps)-1)]); err != nil {
				if i > 0 {
					_ = en.e.UnregisterBatch(ctx, bufs[:i])
				}
				return failErr(fmt.Sprintf("%s: buffer %d (nothing of the batch was registered)", what, i), err, C.FERRY_ERR_PLUGIN_FAILED)
			}
		}
		return C.FERRY_OK
	})
}

//export ferry_go_unregister_batch
func ferry_go_unregister_batch(h C.ferry_engine_t, ptrs *unsafe.Pointer, n C.size_t) C.int {
	const what = "ferry_unregister_batch"
	return onEngine(h, what, func(en *engine) C.int {
		switch {
		case ptrs == nil:
			return fail(C.FERRY_ERR_INVALID, "%s: ptrs is NULL", what)
		case n == 0:
			return fail(C.FERRY_ERR_INVALID, "%s: n is 0; unregister at least one buffer", what)
		}
		if err := elems("ptrs", unsafe.Pointer(ptrs), uint64(n), uint64(unsafe.Sizeof(*ptrs))); err != nil {
			return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was unregistered", what, err)
		}
		ps := unsafe.Slice(ptrs, int(n))
		bufs := make([][]byte, n)
		for i, p := range ps {
			if p == nil {
				return fail(C.FERRY_ERR_INVALID, "%s: pointer %d is NULL; nothing was unregistered", what, i)
			}
			if err := span(fmt.Sprintf("pointer %d", i), p, 1, 1); err != nil {
				return fail(C.FERRY_ERR_INVALID, "%s: %v; nothing was unregistered", what, err)
			}
			bufs[i] = bytesAt(p, 1)
		}
		return result(what, en.e.UnregisterBatch(context.Background(), bufs), C.FERRY_ERR_PLUGIN_FAILED)
	})
}
