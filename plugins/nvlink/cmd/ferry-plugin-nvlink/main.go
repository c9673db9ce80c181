// Command ferry-plugin-nvlink is the nvlink transport as a Ferry plugin:
// same-machine GPU to GPU (and GPU to host) transfers between engines in
// different processes, through imported device handles.
package main

import (
	"github.com/ferrydev/ferry/plugins/nvlink"
	"github.com/ferrydev/ferry/sdk"
)

func main() { sdk.ServeTransport(nvlink.New()) }
