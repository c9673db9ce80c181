//go:build ferry_serve_device

// Command ferry-device-rocm is the rocm device plugin's process: the
// engine starts it, and it serves devices/rocm over go-plugin.
//
// The build tag goes when sdk.ServeDevice is merged (see
// main_unserved.go).
package main

import (
	"github.com/ferrydev/ferry/devices/rocm"
	"github.com/ferrydev/ferry/sdk"
)

func main() {
	sdk.ServeDevice(rocm.New(rocm.WithLogger(sdk.NewLogger(""))))
}
