package main_test

import (
	"strings"
	"testing"
)

// TestExplainAppMemory: `ferry explain --app-memory` explains a request
// from memory the application allocated itself: shm, which maps memory,
// is skipped with what to do, tcp is taken, and the extra copy is named;
// without the flag the same request takes shm.
func TestExplainAppMemory(t *testing.T) {
	_, out := startRun(t, "--name", "explain-target", "--expose", "64KiB")
	var ready struct {
		Metastore string `json:"metastore"`
	}
	readReady(t, out, &ready)
	base := []string{"explain", "--metastore", ready.Metastore, "--segment", "explain-target", "--op", "write", "--size", "4KiB"}
	text := ferry(t, append(base, "--app-memory")...)
	for _, want := range []string{"tcp: taken", "shm: considered, skipped: maps memory for zero copy", "allocate it through Engine.Allocate", "one extra copy"} {
		if !strings.Contains(text, want) {
			t.Errorf("explain --app-memory lacks %q:\n%s", want, text)
		}
	}
	if text := ferry(t, base...); !strings.Contains(text, "shm: taken") || strings.Contains(text, "extra copy") {
		t.Errorf("explain of Engine.Allocate memory on this machine: want shm taken and no extra copy:\n%s", text)
	}
}
