package main_test

import (
	"strings"
	"testing"
)

// TestExplainAppMemory: `ferry explain --app-memory` explains a request
// from memory the application allocated itself: shm is taken and copies
// it by cross-memory attach with no extra copy, tcp follows with its one
// extra copy, and each is named; without the flag the same request takes
// shm and no copy is mentioned.
func TestExplainAppMemory(t *testing.T) {
	_, out := startRun(t, "--name", "explain-target", "--expose", "64KiB")
	var ready struct {
		Metastore string `json:"metastore"`
	}
	readReady(t, out, &ready)
	base := []string{"explain", "--metastore", ready.Metastore, "--segment", "explain-target", "--op", "write", "--size", "4KiB"}
	text := ferry(t, append(base, "--app-memory")...)
	for _, want := range []string{"shm: taken", "straight to or from the peer's mapping, no extra copy", "tcp: usable, a later attempt", "one extra copy here", "Engine.Allocate memory avoids it"} {
		if !strings.Contains(text, want) {
			t.Errorf("explain --app-memory lacks %q:\n%s", want, text)
		}
	}
	if text := ferry(t, base...); !strings.Contains(text, "shm: taken") || strings.Contains(text, "extra copy") {
		t.Errorf("explain of Engine.Allocate memory on this machine: want shm taken and no extra copy:\n%s", text)
	}
}
