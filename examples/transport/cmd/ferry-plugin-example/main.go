// Command ferry-plugin-example is the example transport as a plugin
// binary: the host starts it, go-plugin and the SDK do the rest.
package main

import (
	"github.com/ferrydev/ferry/examples/transport"
	"github.com/ferrydev/ferry/sdk"
)

func main() { sdk.ServeTransport(example.New()) }
