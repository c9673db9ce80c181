//go:build ferry_serve_device

// Command ferry-device-cuda is the cuda device plugin's process: the
// engine starts it, and it serves devices/cuda over go-plugin.
//
// The build tag goes when sdk.ServeDevice is merged (see
// main_unserved.go).
package main

import (
	"github.com/ferrydev/ferry/devices/cuda"
	"github.com/ferrydev/ferry/sdk"
)

func main() {
	sdk.ServeDevice(cuda.New(cuda.WithLogger(sdk.NewLogger(""))))
}
