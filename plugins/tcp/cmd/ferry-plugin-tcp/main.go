package main

import (
	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
)

func main() { sdk.ServeTransport(tcp.New()) }
