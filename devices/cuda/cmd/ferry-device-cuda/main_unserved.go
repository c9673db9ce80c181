//go:build !ferry_serve_device

// Command ferry-device-cuda is the cuda device plugin's process. Until
// sdk.ServeDevice is merged it serves nothing: it probes, prints what it
// found, and exits 1. After the merge delete this file and the build tag
// of main.go.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/ferrydev/ferry/devices/cuda"
)

func main() {
	ctx := context.Background()
	d := cuda.New()
	r, err := d.Probe(ctx)
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "ferry-device-cuda: probe:", err)
	case !r.Available:
		fmt.Fprintln(os.Stderr, "ferry-device-cuda: unavailable:", r.Reason)
	default:
		devs, err := d.Devices(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ferry-device-cuda: devices:", err)
		}
		for _, a := range devs {
			fmt.Fprintf(os.Stderr, "ferry-device-cuda: device %d: %s %s %s numa %d, %d bytes, peers %v over %q\n", a.Index, a.Name, a.UUID, a.PCIBusID, a.NUMANode, a.Memory, a.Peers, a.Link)
		}
	}
	fmt.Fprintln(os.Stderr, "ferry-device-cuda: built without sdk.ServeDevice (build tag ferry_serve_device): serves nothing")
	os.Exit(1)
}
