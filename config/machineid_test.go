package config

import (
	"errors"
	"os"
	"testing"
)

func TestDeriveMachineID(t *testing.T) {
	files := map[string]string{
		"/etc/machine-id":    "0123456789abcdef0123456789abcdef\n",
		"/other/machine-id":  "fedcba9876543210fedcba9876543210\n",
		"/empty":             " \n",
		"/var/lib/dbus/same": "0123456789abcdef0123456789abcdef",
	}
	read := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, os.ErrNotExist
	}
	host := func(name string, err error) func() (string, error) {
		return func() (string, error) { return name, err }
	}
	fromEtc := deriveMachineID([]string{"/etc/machine-id"}, read, host("h", nil))
	tests := []struct {
		name     string
		files    []string
		hostname func() (string, error)
		want     string // "" means: compare with fromEtc
	}{
		{"machine-id", []string{"/etc/machine-id"}, host("h", nil), ""},
		{"first readable file wins", []string{"/missing", "/empty", "/var/lib/dbus/same"}, host("h", nil), ""},
		{"hostname when no file", []string{"/missing"}, host("node-7", nil), "node-7"},
		{"localhost when nothing", nil, host("", errors.New("no")), "localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := deriveMachineID(tt.files, read, tt.hostname)
			want := tt.want
			if want == "" {
				want = fromEtc
			}
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		})
	}
	if len(fromEtc) != 32 || fromEtc == "0123456789abcdef0123456789abcdef" {
		t.Errorf("derived id %q: want 32 hex digits that differ from the raw machine id", fromEtc)
	}
	if other := deriveMachineID([]string{"/other/machine-id"}, read, host("h", nil)); other == fromEtc {
		t.Error("two machine ids derive the same id")
	}
}

// TestMachineIDScope: engines that share /etc/machine-id (containers from
// one image, network namespaces of one machine) get one id only when they
// share the boot and the network namespace too.
func TestMachineIDScope(t *testing.T) {
	read := func(boot string) func(string) ([]byte, error) {
		return func(p string) ([]byte, error) {
			if p == "/proc/sys/kernel/random/boot_id" {
				return []byte(boot + "\n"), nil
			}
			return nil, os.ErrNotExist
		}
	}
	ns := func(n string) func(string) (string, error) { return func(string) (string, error) { return n, nil } }
	id := "0123456789abcdef0123456789abcdef"
	here := scopeMachineID(id, shmScope(read("b1"), ns("net:[4026531840]")))
	if again := scopeMachineID(id, shmScope(read("b1"), ns("net:[4026531840]"))); again != here {
		t.Errorf("one machine, boot and namespace gave %q and %q", here, again)
	}
	for name, other := range map[string]string{
		"another network namespace": scopeMachineID(id, shmScope(read("b1"), ns("net:[4026532201]"))),
		"another boot":              scopeMachineID(id, shmScope(read("b2"), ns("net:[4026531840]"))),
		"another machine":           scopeMachineID("fedcba9876543210fedcba9876543210", shmScope(read("b1"), ns("net:[4026531840]"))),
	} {
		if other == here {
			t.Errorf("%s gives the same machine id %q", name, here)
		}
	}
	if len(here) != 32 {
		t.Errorf("scoped id %q: want 32 hex digits", here)
	}
}
