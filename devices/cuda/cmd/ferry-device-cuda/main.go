// Command ferry-device-cuda is the cuda device plugin's process: the
// engine starts it, and it serves devices/cuda over go-plugin.
package main

import (
	"github.com/ferrydev/ferry/devices/cuda"
	"github.com/ferrydev/ferry/sdk"
)

func main() {
	sdk.ServeDevice(cuda.New(cuda.WithLogger(sdk.NewLogger(""))))
}
