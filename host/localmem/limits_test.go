package localmem

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk"
)

// A Register that would take the segment past segment.MaxBuffers fails
// clearly, registers nothing with any plugin, and leaves the table as it
// was; one below the cap still succeeds. The table is filled directly:
// registering 32,768 buffers one by one costs minutes.
func TestRegisterRefusedPastMaxBuffers(t *testing.T) {
	ctx := context.Background()
	tb, mem := allocTable(t, "t", 1<<16)
	p := Addr(mem)
	fill := make([]Buf, segment.MaxBuffers-1)
	for i := range fill {
		fill[i] = Buf{Buffer: segment.Buffer{Region: uint32(1000 + i), Base: 1<<40 + uint64(i)*16, Length: 16, Perm: sdk.PermLocal, Location: Location}}
	}
	tb.bufs.Store(&fill)
	pl := newFake("a")
	if err := tb.Register(ctx, p, 4096, sdk.PermRemoteRead, []Plugin{pl}); err != nil {
		t.Fatalf("the last buffer under the cap: %v", err)
	}
	err := tb.Register(ctx, p+4096, 4096, sdk.PermRemoteRead, []Plugin{pl})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("a buffer past the cap: %v, want ErrInvalid", err)
	}
	for _, w := range []string{"32768 buffers are registered", "cap of 32768", "register larger buffers"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if len(pl.regions) != 1 {
		t.Fatalf("the plugin holds %d regions, want the 1 under the cap", len(pl.regions))
	}
	if n := len(tb.Buffers()); n != segment.MaxBuffers {
		t.Fatalf("the table lists %d buffers after the refusal, want %d", n, segment.MaxBuffers)
	}
	if _, _, ok := tb.Lookup(uint64(p+4096), 1); ok {
		t.Fatal("the refused buffer is found by Lookup")
	}
}
