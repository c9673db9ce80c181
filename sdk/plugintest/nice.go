package plugintest

import (
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk"
)

// BulkNice returns a niceness for a plugin's bulk_nice in a test of nice
// threads: 6 above this process's (ProcessNice), and not
// sdk.DefaultBulkNice, at which a peer engine's plugin on its defaults
// runs its own, so that NiceThreads counts the tested plugin's alone. It
// skips the test when the process runs too nice to leave one above it.
func BulkNice(t testing.TB) int {
	t.Helper()
	nice := ProcessNice() + 6
	if nice == sdk.DefaultBulkNice {
		nice++
	}
	if nice > sdk.MaxNice {
		t.Skipf("the test process runs at niceness %d: no niceness above it to check", nice-6)
	}
	return nice
}

// NiceThreads counts the threads of this process whose niceness is nice
// (Linux: /proc/self/task/*/stat; elsewhere 0), for tests of what runs on
// nice threads (sdk.LowerThread).
func NiceThreads(nice int) int {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		b, err := os.ReadFile("/proc/self/task/" + e.Name() + "/stat")
		if err != nil {
			continue // the thread ended
		}
		// Fields after the command name, which may hold spaces: the
		// niceness is field 19, the 17th after it.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) > 16 {
			if v, err := strconv.Atoi(f[16]); err == nil && v == nice {
				n++
			}
		}
	}
	return n
}

// ProcessNice is the niceness of this process's main thread; a test of
// nice threads picks a niceness above it.
func ProcessNice() int {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) > 16 {
		if v, err := strconv.Atoi(f[16]); err == nil {
			return v
		}
	}
	return 0
}
