package loader

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/internal/pluginclient"
)

// tcpCopy copies the tcp plugin into a directory of its own, so that a
// test may swap the file, and returns the copy's path, bytes and sha256.
func tcpCopy(t *testing.T) (string, []byte, string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(binDir, "ferry-plugin-tcp"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ferry-plugin-tcp")
	if err := os.WriteFile(path, b, 0o755); err != nil {
		t.Fatal(err)
	}
	sum, err := FileSHA256(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, b, sum
}

// swaps are the two ways to put other bytes at a plugin's path: rename
// another file over it (a new inode), or rewrite the file itself (the
// same inode). Linux allows both here: nothing executes the file yet, so
// no ETXTBSY stops the rewrite.
var swaps = []struct {
	name string
	swap func(path string, with []byte) error
}{
	{"renamed over", func(path string, with []byte) error {
		if err := os.WriteFile(path+".new", with, 0o755); err != nil {
			return err
		}
		return os.Rename(path+".new", path)
	}},
	{"rewritten in place", func(path string, with []byte) error {
		return os.WriteFile(path, with, 0o755)
	}},
}

// swapBeforeExec installs a hook that swaps the file at path for with
// after the loader hashed it and just before the plugin is executed; the
// returned func reports whether the swap happened.
func swapBeforeExec(t *testing.T, path string, swap func(string, []byte) error, with []byte) func() bool {
	t.Helper()
	var swapped bool
	pluginclient.TestHookBeforeExec = func(p string) {
		if p != path || swapped {
			return
		}
		if err := swap(path, with); err != nil {
			t.Errorf("swap %s: %v", path, err)
			return
		}
		swapped = true
	}
	t.Cleanup(func() { pluginclient.TestHookBeforeExec = nil })
	return func() bool { return swapped }
}

// exeSHA256 is the sha256 of the bytes process pid executes.
func exeSHA256(t *testing.T, pid int) string {
	t.Helper()
	sum, err := FileSHA256(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatalf("hash the executable of plugin process %d: %v", pid, err)
	}
	return sum
}

// The attack of issue 11.6: a pinned plugin's file is swapped between the
// hash and the exec. The swapped-in program would leave a marker; it never
// runs, and the pinned bytes do.
func TestPinnedBinarySwappedBeforeExec(t *testing.T) {
	for _, s := range swaps {
		t.Run(s.name, func(t *testing.T) {
			path, _, sum := tcpCopy(t)
			marker := filepath.Join(t.TempDir(), "intruder-ran")
			intruder := []byte(fmt.Sprintf("#!/bin/sh\necho intruder > '%s'\n", marker))
			swapped := swapBeforeExec(t, path, s.swap, intruder)

			p, err := Start(context.Background(), Spec{Name: "tcp", Path: path, SHA256: sum}, nil)
			if _, serr := os.Stat(marker); serr == nil {
				t.Errorf("the binary swapped in after the sha256 check ran (it left %s)", marker)
			}
			if err != nil {
				t.Fatalf("Start of the pinned plugin: %v", err)
			}
			defer p.Kill()
			if !swapped() {
				t.Fatal("the hook did not swap the binary: the test tested nothing")
			}
			if got, _ := os.ReadFile(path); string(got) != string(intruder) {
				t.Fatalf("the file at %s is not the intruder after the swap", path)
			}
			if p.Info.Name != "tcp" {
				t.Errorf("the plugin describes itself as %q, want tcp", p.Info.Name)
			}
			if run := exeSHA256(t, p.PID()); run != sum || p.SHA256 != sum {
				t.Errorf("pinned sha256 %s; the process runs %s, Start reports %s", sum, run, p.SHA256)
			}
		})
	}
}

// Without a pin, the sha256 Start reports is the hash of the bytes that
// run, even when the file changes between the hash and the exec: here to
// another working plugin (tcp with bytes appended), which would run
// undetected under the hash of the original if the path were executed.
func TestUnpinnedReportsHashOfWhatRuns(t *testing.T) {
	for _, s := range swaps {
		t.Run(s.name, func(t *testing.T) {
			path, b, sum := tcpCopy(t)
			other := append(append([]byte(nil), b...), "trailing bytes make another binary that still runs"...)
			swapped := swapBeforeExec(t, path, s.swap, other)

			p, err := Start(context.Background(), Spec{Name: "tcp", Path: path}, nil)
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer p.Kill()
			if !swapped() {
				t.Fatal("the hook did not swap the binary: the test tested nothing")
			}
			run := exeSHA256(t, p.PID())
			if p.SHA256 != run {
				t.Errorf("Start reports sha256 %s, but the process runs %s", p.SHA256, run)
			}
			if run != sum {
				t.Errorf("the process runs %s, not the %s that was read when it was checked", run, sum)
			}
		})
	}
}
