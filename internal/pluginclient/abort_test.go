package pluginclient_test

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// Abort carries the tokens to the transport and its count back; Describe
// lists the interface, so that the host calls it only where it exists.
func TestAbort(t *testing.T) {
	var got []uint64
	a := &plugintest.MockAborter{AbortFunc: func(_ context.Context, tokens []uint64) (int, error) {
		got = append(got[:0], tokens...)
		if len(tokens) == 0 {
			return 0, errors.New("no tokens")
		}
		return len(tokens) - 1, nil
	}}
	c := plugintest.Connect(t, a, 0)
	d, err := c.Describe(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if !d.Implements(sdk.InterfaceAborter) {
		t.Fatalf("an aborter's Describe lists %q, want %q among them", d.Interfaces, sdk.InterfaceAborter)
	}
	tokens := []uint64{1, 1 << 63, 42}
	n, err := c.Abort(t.Context(), tokens)
	if err != nil || n != 2 || !reflect.DeepEqual(got, tokens) {
		t.Fatalf("Abort = %d, %v; transport saw %v; want 2, nil, %v", n, err, got, tokens)
	}
	_, err = c.Abort(t.Context(), nil)
	wantErr(t, err, "abort", "no tokens")
	if errors.Is(err, pluginclient.ErrUnimplemented) {
		t.Fatal("an aborter's failure reads as unimplemented")
	}
}

// A transport without Aborter, and a protocol-1 server, answer
// Unimplemented, which the client names; Describe does not list it.
func TestAbortUnimplemented(t *testing.T) {
	for _, protocol := range []int{1, 2} {
		c := plugintest.Connect(t, &plugintest.Mock{}, protocol)
		d, err := c.Describe(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if d.Implements(sdk.InterfaceAborter) {
			t.Fatalf("protocol %d: a plain Mock lists %q", protocol, d.Interfaces)
		}
		_, err = c.Abort(t.Context(), []uint64{7})
		var ue *pluginclient.UnimplementedError
		if !errors.Is(err, pluginclient.ErrUnimplemented) || !errors.As(err, &ue) || ue.Method != "Abort" {
			t.Fatalf("protocol %d: Abort on a plugin without it: %v, want an *UnimplementedError for Abort", protocol, err)
		}
		wantErr(t, err, `plugin "mock" does not implement Abort; needs SDK >= protocol 2`)
	}
}
