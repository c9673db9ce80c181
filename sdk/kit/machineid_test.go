package kit

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk"
)

func TestMachineID(t *testing.T) {
	if got := MachineID(sdk.StartConfig{MachineID: "from-host"}); got != "from-host" {
		t.Fatalf("MachineID with the host's id = %q", got)
	}
	files := map[string]string{"/etc/machine-id": " etc-id\n", "/proc/sys/kernel/random/boot_id": "boot-id\n"}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	host := func() (string, error) { return " box\n", nil }
	if got := rawMachineID(read, host); got != "etc-id" {
		t.Fatalf("raw id %q, want the machine-id file's", got)
	}
	delete(files, "/etc/machine-id")
	if got := rawMachineID(read, host); got != "boot-id" {
		t.Fatalf("raw id %q, want the boot id", got)
	}
	delete(files, "/proc/sys/kernel/random/boot_id")
	if got := rawMachineID(read, host); got != "box" {
		t.Fatalf("raw id %q, want the host name", got)
	}
	if got := rawMachineID(read, func() (string, error) { return "", errors.New("no name") }); got != "" {
		t.Fatalf("raw id %q with nothing to read", got)
	}

	a, b := hashMachineID("etc-id"), hashMachineID("other")
	if len(a) != 32 || a == b || strings.Contains(a, "etc-id") || a != hashMachineID("etc-id") {
		t.Fatalf("hashes %q and %q: want 32 stable hex digits that differ per machine", a, b)
	}
	own := MachineID(sdk.StartConfig{})
	if own != hashMachineID(rawMachineID(os.ReadFile, os.Hostname)) {
		t.Fatalf("this machine's id %q is not the hash of its raw id", own)
	}
	if raw := rawMachineID(os.ReadFile, os.Hostname); raw != "" && strings.Contains(own, raw) {
		t.Fatal("MachineID publishes the raw machine id")
	}
}
