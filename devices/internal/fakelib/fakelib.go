// Package fakelib builds and inspects the FAKE vendor libraries the GPU
// device plugins' tests load in place of libamdhip64.so and libcuda.so.1
// (devices/rocm/testdata/fakehip.c, devices/cuda/testdata/fakecuda.c). It
// is for tests only: it compiles C with gcc and must not be imported by a
// plugin.
package fakelib

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

static int call_live(const char *path, const char *sym) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!h) return -1;
	int (*f)(void) = (int (*)(void))dlsym(h, sym);
	int n = f ? f() : -2;
	dlclose(h);
	return n;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os/exec"
	"unsafe"
)

// Build compiles C sources with gcc into out (a shared library when
// shared is true, else an executable). A missing gcc is an error that
// says so: the tests that need it fail, they do not skip.
func Build(out string, shared bool, srcs ...string) error {
	if _, err := exec.LookPath("gcc"); err != nil {
		return fmt.Errorf("these tests build a FAKE vendor library with gcc, and gcc is not on PATH: %w", err)
	}
	args := []string{"-O1", "-Wall", "-o", out}
	if shared {
		args = append(args, "-shared", "-fPIC")
	}
	args = append(args, srcs...)
	args = append(args, "-lpthread")
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("gcc %v: %w\n%s", args, err, b)
	}
	return nil
}

// ErrNotLoaded is Live's error for a library this process has not
// loaded (yet): it holds nothing.
var ErrNotLoaded = errors.New("not loaded in this process")

// Live calls the fake library's live-object counter sym (what is still
// allocated, opened or registered) in the copy of path this process
// already loaded.
func Live(path, sym string) (int, error) {
	cp, cs := C.CString(path), C.CString(sym)
	defer C.free(unsafe.Pointer(cp))
	defer C.free(unsafe.Pointer(cs))
	switch n := int(C.call_live(cp, cs)); n {
	case -1:
		return 0, fmt.Errorf("%s: %w", path, ErrNotLoaded)
	case -2:
		return 0, fmt.Errorf("%s has no %s", path, sym)
	default:
		return n, nil
	}
}
