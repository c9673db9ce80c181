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
	return deriveMachineID(machineIDFiles, os.ReadFile, os.Hostname)
})

// DefaultMachineID returns this machine's id as Ferry publishes it: derived
// from /etc/machine-id (or /var/lib/dbus/machine-id) when there is one, else
// the hostname, else "localhost". Engines on one machine get the same id.
//
// The machine id itself is not published: machine-id(5) asks applications
// not to expose it, so Ferry publishes an HMAC-SHA256 of it keyed for Ferry
// (32 hex digits), which is stable and unique but reveals nothing.
func DefaultMachineID() string { return defaultMachineID() }

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
