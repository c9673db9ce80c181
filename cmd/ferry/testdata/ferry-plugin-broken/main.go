// Command ferry-plugin-broken is a test fixture for `ferry conformance`:
// Ferry's real TCP transport with one fault, chosen by the suffix of the
// name it runs as (ferry-plugin-broken-panic, ...), so that one build
// serves every test:
//
//   - panic: Submit panics at the 40th descriptor;
//   - maxslice: Describe declares MaxSlice = 2^64-1;
//   - badkind: Describe declares memory kind "file", which RegisterMemory
//     refuses.
//
// Stray tokens, over-reported byte counts and hangs come from
// ferry-plugin-fault's flip, overreport and stall.
package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

type broken struct {
	*tcp.Transport
	mode string
	n    atomic.Int64
}

func (b *broken) Describe(ctx context.Context) (sdk.Info, error) {
	i, err := b.Transport.Describe(ctx)
	i.TestTool = true // a fixture: `ferry plugins` leaves it out of a directory's listing
	switch b.mode {
	case "maxslice":
		i.MaxSlice = ^uint64(0)
	case "badkind":
		i.MemoryKinds = append(i.MemoryKinds, sdk.MemoryFile)
	}
	return i, err
}

func (b *broken) RegisterMemory(ctx context.Context, r sdk.Region) error {
	if b.mode == "badkind" && r.Kind == sdk.MemoryFile {
		return errors.New("no file backend")
	}
	return b.Transport.RegisterMemory(ctx, r)
}

func (b *broken) Submit(d *ring.Descriptor, c sdk.Completer) {
	if b.mode == "panic" && b.n.Add(1) == 40 {
		panic("ferry-plugin-broken: the 40th descriptor")
	}
	b.Transport.Submit(d, c)
}

func main() {
	name := filepath.Base(os.Args[0])
	mode := name[strings.LastIndex(name, "-")+1:]
	sdk.ServeTransport(&broken{Transport: tcp.New(), mode: mode})
}
