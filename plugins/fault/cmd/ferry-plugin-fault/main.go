package main

import (
	"github.com/ferrydev/ferry/plugins/fault"
	"github.com/ferrydev/ferry/sdk"
)

func main() { sdk.ServeTransport(fault.New()) }
