package simdev_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/ferrydev/ferry/plugins/simdev/simmem"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(plugintest.Main{Binaries: []string{"ferry-device-simdev"}, CheckLeaks: true}.Run(m, func(dir string) { binary = filepath.Join(dir, "ferry-device-simdev") }))
}

// openSim maps a HandleSim here, as an application would.
func openSim(h sdk.Handle) ([]byte, func() error, error) {
	m, err := simmem.Open(h)
	if err != nil {
		return nil, nil, err
	}
	return m.Bytes(), m.Close, nil
}

func TestConformance(t *testing.T) {
	plugintest.RunDevice(t, plugintest.DeviceConfig{
		Binary: binary,
		Config: []byte(`devices = 2
memory = "64MiB"`),
		Open: openSim,
	})
}
