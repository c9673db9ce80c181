package main

import (
	"github.com/ferrydev/ferry/plugins/simdev"
	"github.com/ferrydev/ferry/sdk"
)

func main() { sdk.ServeDevice(simdev.New()) }
