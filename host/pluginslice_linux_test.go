package host_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
)

// TestPluginThreadsHaveShortSlices: every thread of a real plugin process
// (tcp and shm, as the engine starts them) that is not a nice bulk thread
// asks the kernel for sdk.LatencySlice, so that a plugin lane that wakes
// beside busy processes gets its core within about that long
// (sdk/serve.go, pluginSlice). Nice threads, where a plugin has them, keep
// sdk.BulkSlice.
func TestPluginThreadsHaveShortSlices(t *testing.T) {
	e := newEngine(t, "slices")
	seen := 0
	for _, p := range e.Status(context.Background()).Plugins {
		if p.PID == 0 {
			t.Fatalf("plugin %s has no process (state %s)", p.Name, p.State)
		}
		tasks, err := os.ReadDir("/proc/" + strconv.Itoa(p.PID) + "/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			tid, err := strconv.Atoi(task.Name())
			if err != nil {
				continue
			}
			a, err := unix.SchedGetAttr(tid, 0)
			if errors.Is(err, unix.ESRCH) {
				continue // the thread ended meanwhile
			}
			if err != nil {
				t.Fatalf("plugin %s thread %d: sched_getattr: %v", p.Name, tid, err)
			}
			want := sdk.LatencySlice
			if a.Nice > 0 {
				want = sdk.BulkSlice
			}
			if got := time.Duration(a.Runtime); got != want {
				t.Errorf("plugin %s thread %d (nice %d): slice %v, want %v", p.Name, tid, a.Nice, got, want)
			}
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("no plugin thread looked at")
	}
}
