package config

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"sync"
)

// machineIDFiles hold the systemd / D-Bus machine id.
var machineIDFiles = []string{"/etc/machine-id", "/var/lib/dbus/machine-id"}

var defaultMachineID = sync.OnceValue(func() string {
	return scopeMachineID(deriveMachineID(machineIDFiles, os.ReadFile, os.Hostname), shmScope(os.ReadFile, os.Readlink))
})

// DefaultMachineID returns this machine's id as Ferry publishes it: derived
// from /etc/machine-id (or /var/lib/dbus/machine-id) when there is one, else
// the hostname, else "localhost", together with the kernel's boot id and
// this process's network namespace. Engines get the same id exactly when
// same-machine transports can work between them: shared memory needs one
// running kernel (containers built from one image share /etc/machine-id,
// and a machine id outlives reboots), and its unix sockets live in the
// network namespace. Two engines in two network namespaces of one machine
// therefore get two ids, and reach each other over the network.
//
// The machine id itself is not published: machine-id(5) asks applications
// not to expose it, so Ferry publishes an HMAC-SHA256 of it keyed for Ferry
// (32 hex digits), which is stable and unique but reveals nothing.
func DefaultMachineID() string { return defaultMachineID() }

// shmScope names what same-machine transports need to share besides the
// machine: the boot and the network namespace ("" for what cannot be
// read).
func shmScope(read func(string) ([]byte, error), readlink func(string) (string, error)) string {
	boot, _ := read("/proc/sys/kernel/random/boot_id")
	netns, _ := readlink("/proc/self/ns/net")
	return "boot=" + strings.TrimSpace(string(boot)) + ";net=" + netns
}

// scopeMachineID binds id to scope; an empty scope leaves it as it is.
func scopeMachineID(id, scope string) string {
	if scope == "" {
		return id
	}
	m := hmac.New(sha256.New, []byte(id))
	m.Write([]byte("ferry shm scope\x00" + scope))
	return hex.EncodeToString(m.Sum(nil)[:16])
}

func deriveMachineID(files []string, read func(string) ([]byte, error), hostname func() (string, error)) string {
	for _, f := range files {
		b, err := read(f)
		if err != nil {
			continue
		}
		if id := strings.TrimSpace(string(b)); id != "" {
			m := hmac.New(sha256.New, []byte(id))
			m.Write([]byte("ferry machine id"))
			return hex.EncodeToString(m.Sum(nil)[:16])
		}
	}
	if h, err := hostname(); err == nil && strings.TrimSpace(h) != "" {
		return strings.TrimSpace(h)
	}
	return "localhost"
}
