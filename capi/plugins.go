package main

/*
#include "ferry.h"
*/
import "C"

import (
	"context"
	"encoding/hex"
	"math"
	"time"

	"github.com/ferrydev/ferry/host"
)

// maxDrainMS is the largest drain_ms that is a time.Duration.
const maxDrainMS = math.MaxInt64 / int64(time.Millisecond)

// ferry_go_upgrade_plugin is ferry_upgrade_plugin: Engine.UpgradePlugin
// of the named plugin to the binary at path (NULL or "": the plugin
// directory again), pinned by sha256 unless it is NULL or "", with drain_ms as its
// drain bound (0: the default). It blocks until the old run has stopped;
// a binary that does not start leaves the old run serving and returns
// FERRY_ERR_PLUGIN_FAILED with why.
//
//export ferry_go_upgrade_plugin
func ferry_go_upgrade_plugin(h C.ferry_engine_t, name, path, sha *C.char, drainMS C.uint64_t) C.int {
	const what = "ferry_upgrade_plugin"
	return onEngine(h, what, func(en *engine) C.int {
		u := host.PluginUpgrade{Name: goString(name), Path: goString(path), SHA256: goString(sha)}
		switch {
		case u.Name == "":
			return fail(C.FERRY_ERR_INVALID, "%s: name is NULL or empty; give the plugin block's name (\"tcp\")", what)
		case u.SHA256 != "" && !isSHA256(u.SHA256):
			return fail(C.FERRY_ERR_INVALID, "%s: plugin %q: sha256 %q is not 64 hex digits; give the output of `sha256sum <binary>` or NULL; nothing was upgraded", what, u.Name, u.SHA256)
		case uint64(drainMS) > uint64(maxDrainMS):
			return fail(C.FERRY_ERR_INVALID, "%s: plugin %q: drain_ms %d is too large; give 0 for the default (%v) or a bound in milliseconds", what, u.Name, uint64(drainMS), host.DefaultUpgradeDrain)
		}
		u.Drain = time.Duration(drainMS) * time.Millisecond
		return result(what, en.e.UpgradePlugin(context.Background(), u), C.FERRY_ERR_PLUGIN_FAILED)
	})
}

// isSHA256 reports whether s is a hex sha256 digest (64 hex digits).
func isSHA256(s string) bool {
	if len(s) != 64 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
