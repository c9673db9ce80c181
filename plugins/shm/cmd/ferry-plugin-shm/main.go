package main

import (
	"github.com/ferrydev/ferry/plugins/shm"
	"github.com/ferrydev/ferry/sdk"
)

func main() { sdk.ServeTransport(shm.New()) }
