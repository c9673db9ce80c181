package main

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

// The path this library was loaded from, or NULL.
static const char *ferry_library_path(void) {
	Dl_info info;
	if (dladdr((void *)&ferry_library_path, &info) == 0) {
		return NULL;
	}
	return info.dli_fname;
}
*/
import "C"

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/ferrydev/ferry/host/loader"
)

// pluginsBeside returns the directory libferry.so was loaded from when it
// holds plugin executables (ferry-plugin-*), else "". An embedder, the
// Python interpreter or a C program, is rarely installed beside the
// plugins; the library often is: bin/ after make build, and the Python
// wheel's ferry/bin/. create uses it for a configuration that names no
// plugin_dir when $FERRY_PLUGIN_DIR is unset, before the loader's own
// fallback (the running executable's directory).
func pluginsBeside() string {
	p := C.ferry_library_path()
	if p == nil {
		return ""
	}
	dir := filepath.Dir(C.GoString(p))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), loader.BinaryPrefix) {
			return dir
		}
	}
	return ""
}
