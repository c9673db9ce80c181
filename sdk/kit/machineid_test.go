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
	const raw = "0123456789abcdef0123456789abcdef"
	files := map[string]string{"/etc/machine-id": raw + "\n", "/empty": " \n"}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	host := func(h string, err error) func() (string, error) { return func() (string, error) { return h, err } }
	// The value config.DefaultMachineID derives from the same file: a
	// plugin started without the host's id publishes what the host would.
	const derived = "0c69dc3f66a731af9cc2f2dcfc334ec3"
	for _, tc := range []struct {
		files    []string
		hostname func() (string, error)
		want     string
	}{
		{[]string{"/etc/machine-id"}, host("h", nil), derived},
		{[]string{"/missing", "/empty", "/etc/machine-id"}, host("h", nil), derived},
		{[]string{"/missing"}, host(" box \n", nil), "box"},
		{[]string{"/missing"}, host("", errors.New("no name")), "localhost"},
	} {
		if got := deriveMachineID(tc.files, read, tc.hostname); got != tc.want {
			t.Errorf("deriveMachineID(%v) = %q, want %q", tc.files, got, tc.want)
		}
	}
	own := MachineID(sdk.StartConfig{})
	if own == "" || own != MachineID(sdk.StartConfig{}) {
		t.Fatalf("this machine's id %q: empty or not stable", own)
	}
	if b, err := os.ReadFile("/etc/machine-id"); err == nil && strings.TrimSpace(string(b)) != "" {
		if strings.Contains(own, strings.TrimSpace(string(b))) {
			t.Fatal("MachineID publishes the raw /etc/machine-id")
		}
	}
}
