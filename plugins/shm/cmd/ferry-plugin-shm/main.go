package main

import (
	"fmt"
	"os"

	"github.com/ferrydev/ferry/plugins/shm"
	"github.com/ferrydev/ferry/sdk"
)

// A plugin that can serve no new peer ends its process: the host sees the
// exit, reports the plugin restarting and starts a fresh one.
func main() {
	sdk.ServeTransport(shm.New(shm.WithFatal(func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	})))
}
