package gpu

import (
	"fmt"

	"github.com/ferrydev/ferry/sdk"
)

// Config is a GPU device plugin's `config { ... }` block:
//
//	config {
//	  library = "/opt/cuda/lib64/libcuda.so.1"  # default: the loader's libcuda.so.1 / libamdhip64.so
//	  streams = 4                               # streams per device, used in turn; default 4
//	}
type Config struct {
	Library *string `hcl:"library,optional"`
	Streams *int    `hcl:"streams,optional"`
}

// DefaultStreams is the number of streams per device without `streams`.
const DefaultStreams = 4

// maxStreams bounds `streams`: each stream has its own thread.
const maxStreams = 64

// decodeConfig decodes cfg's block; library is "" when not set.
func decodeConfig(cfg sdk.StartConfig) (library string, streams int, err error) {
	var c Config
	if err := sdk.DecodeConfig(cfg, &c); err != nil {
		return "", 0, err
	}
	streams = DefaultStreams
	if c.Streams != nil {
		streams = *c.Streams
		if streams < 1 || streams > maxStreams {
			return "", 0, fmt.Errorf("streams = %d: want 1 to %d", streams, maxStreams)
		}
	}
	if c.Library != nil {
		if *c.Library == "" {
			return "", 0, fmt.Errorf(`library = "": give a path, or leave library out for the default`)
		}
		library = *c.Library
	}
	return library, streams, nil
}
