package rocm

import (
	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/devices/internal/gpu"
	"github.com/ferrydev/ferry/sdk"
)

// Version is the plugin's own version.
const Version = "0.1.0"

// New returns the rocm device plugin.
func New(opts ...Option) sdk.Device {
	return gpu.New(sdk.DeviceInfo{
		Name:    "rocm",
		Version: Version,
		Kind:    sdk.MemoryROCm,
		Handles: []sdk.HandleType{sdk.HandleHIPIPC},
	}, &hip{}, opts...)
}

// Settings declares the plugin's config block (docs/config.md).
var Settings = gpu.SettingsOf("rocm", DefaultLibrary)

// Option configures New.
type Option = gpu.Option

// WithLibrary loads the HIP runtime from path instead of DefaultLibrary;
// the config's `library` still wins at Start.
func WithLibrary(path string) Option { return gpu.WithLibrary(path) }

// WithLogger logs through l: copies that fail, with the driver's error
// name (a completion carries only a status).
func WithLogger(l hclog.Logger) Option { return gpu.WithLogger(l) }
