package kit

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"sync"

	"github.com/ferrydev/ferry/sdk"
)

// MachineID is the machine id a plugin publishes and compares: the one
// the host passed in cfg (the host publishes a keyed hash, never the raw
// id) or, for a plugin started without one (a test driving it directly),
// a hash of this machine's id, the same for every plugin on the machine.
// It is never the raw /etc/machine-id, which machine-id(5) asks
// applications not to expose.
func MachineID(cfg sdk.StartConfig) string {
	if cfg.MachineID != "" {
		return cfg.MachineID
	}
	return localMachineID()
}

var localMachineID = sync.OnceValue(func() string {
	return hashMachineID(rawMachineID(os.ReadFile, os.Hostname))
})

// rawMachineID is the first non-empty of the systemd machine id, the
// kernel's boot id and the host name.
func rawMachineID(read func(string) ([]byte, error), hostname func() (string, error)) string {
	for _, f := range []string{"/etc/machine-id", "/var/lib/dbus/machine-id", "/proc/sys/kernel/random/boot_id"} {
		if b, err := read(f); err == nil && strings.TrimSpace(string(b)) != "" {
			return strings.TrimSpace(string(b))
		}
	}
	h, _ := hostname()
	return strings.TrimSpace(h)
}

// hashMachineID hides raw behind SHA-256 (32 hex digits): stable, unique,
// and revealing nothing of it.
func hashMachineID(raw string) string {
	sum := sha256.Sum256([]byte("ferry plugin machine id\x00" + raw))
	return hex.EncodeToString(sum[:16])
}
