package sdk_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk"
)

func TestMemoryKindParse(t *testing.T) {
	for _, k := range sdk.MemoryKinds {
		got, err := sdk.ParseMemoryKind(k.String())
		if err != nil || got != k {
			t.Errorf("ParseMemoryKind(%q) = %q, %v", k, got, err)
		}
	}
	if got, err := sdk.ParseMemoryKind(""); err != nil || got != sdk.MemoryCPU {
		t.Errorf(`ParseMemoryKind("") = %q, %v; want cpu`, got, err)
	}
	_, err := sdk.ParseMemoryKind("tpu")
	if err == nil || !strings.Contains(err.Error(), `"tpu"`) || !strings.Contains(err.Error(), `"cpu", "cuda", "rocm", "file"`) {
		t.Errorf(`ParseMemoryKind("tpu"): %v`, err)
	}
}

func TestPermText(t *testing.T) {
	// The strings segment descriptors have always carried.
	want := map[sdk.Perm]string{sdk.PermLocal: "local", sdk.PermRemoteRead: "remote-read", sdk.PermRemoteReadWrite: "remote-read-write"}
	if len(sdk.Perms) != len(want) {
		t.Fatalf("Perms = %v", sdk.Perms)
	}
	for _, p := range sdk.Perms {
		if p.String() != want[p] {
			t.Errorf("%d.String() = %q, want %q", uint8(p), p, want[p])
		}
		got, err := sdk.ParsePerm(want[p])
		if err != nil || got != p {
			t.Errorf("ParsePerm(%q) = %v, %v", want[p], got, err)
		}
		b, err := json.Marshal(struct {
			P sdk.Perm `json:"perm"`
		}{p})
		if err != nil || string(b) != `{"perm":"`+want[p]+`"}` {
			t.Errorf("json of %v = %s, %v", p, b, err)
		}
		var back struct {
			P sdk.Perm `json:"perm"`
		}
		if err := json.Unmarshal(b, &back); err != nil || back.P != p {
			t.Errorf("json round trip of %v = %v, %v", p, back.P, err)
		}
	}
	if _, err := sdk.ParsePerm("rw"); err == nil || !strings.Contains(err.Error(), `unknown permission "rw"`) {
		t.Errorf(`ParsePerm("rw"): %v`, err)
	}
	var back struct {
		P sdk.Perm `json:"perm"`
	}
	if err := json.Unmarshal([]byte(`{"perm":"rw"}`), &back); err == nil || !strings.Contains(err.Error(), "unknown permission") {
		t.Errorf("unmarshal of an unknown permission: %v", err)
	}
	if _, err := json.Marshal(struct{ P sdk.Perm }{0}); err == nil {
		t.Error("marshal of permission 0 succeeded; want an error")
	}
	if !sdk.PermRemoteReadWrite.AllowsRemoteWrite() || sdk.PermRemoteRead.AllowsRemoteWrite() || !sdk.PermRemoteRead.AllowsRemoteRead() || sdk.PermLocal.AllowsRemoteRead() {
		t.Error("Allows* disagree with the permission")
	}
}

func TestPriorityNumbers(t *testing.T) {
	// The ring descriptor carries these numbers: they must not change.
	for p, want := range map[sdk.Priority]struct {
		n    uint8
		name string
	}{sdk.PriorityNormal: {0, "normal"}, sdk.PriorityHigh: {1, "high"}, sdk.PriorityLow: {2, "low"}} {
		if uint8(p) != want.n || p.String() != want.name {
			t.Errorf("priority %s = %d, want %s = %d", p, uint8(p), want.name, want.n)
		}
		got, err := sdk.ParsePriority(want.name)
		if err != nil || got != p {
			t.Errorf("ParsePriority(%q) = %v, %v", want.name, got, err)
		}
	}
	for i, p := range sdk.Priorities {
		if int(p) != i {
			t.Errorf("Priorities[%d] = %d: the list must be in value order", i, p)
		}
	}
	if _, err := sdk.ParsePriority("urgent"); err == nil || !strings.Contains(err.Error(), `"normal", "high", "low"`) {
		t.Errorf(`ParsePriority("urgent"): %v`, err)
	}
	if sdk.Priority(3).Valid() || sdk.Priority(3).String() != "priority(3)" {
		t.Errorf("priority 3: valid %v, %q", sdk.Priority(3).Valid(), sdk.Priority(3))
	}
}
