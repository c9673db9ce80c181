// Command ferry-device-rocm is the rocm device plugin's process: the
// engine starts it, and it serves devices/rocm over go-plugin.
package main

import (
	"github.com/ferrydev/ferry/devices/rocm"
	"github.com/ferrydev/ferry/sdk"
)

func main() {
	sdk.ServeDevice(rocm.New(rocm.WithLogger(sdk.NewLogger(""))))
}
