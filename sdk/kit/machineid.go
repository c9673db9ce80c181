package kit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"sync"

	"github.com/ferrydev/ferry/sdk"
)

// MachineID is the machine id a plugin publishes and compares: the one
// the host passed in cfg or, for a plugin started without one (a test
// that drives it directly), the id the host would pass on this machine.
// It is never the raw /etc/machine-id, which machine-id(5) asks
// applications not to expose: like the host, it publishes an HMAC-SHA256
// of it keyed for Ferry.
func MachineID(cfg sdk.StartConfig) string {
	if cfg.MachineID != "" {
		return cfg.MachineID
	}
	return localMachineID()
}

var localMachineID = sync.OnceValue(func() string {
	return deriveMachineID([]string{"/etc/machine-id", "/var/lib/dbus/machine-id"}, os.ReadFile, os.Hostname)
})

// deriveMachineID is the host's derivation (config.DefaultMachineID),
// which the SDK cannot import: the same machine gets the same id from
// both, so same-machine detection holds between a plugin and a host.
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
