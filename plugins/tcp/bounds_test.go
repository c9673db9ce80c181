package tcp_test

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/plugins/tcp"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// TestReceiveBufferBounded: a flood of reads and writes of foreign
// memory on the listener, over four connections, with a receive budget
// of two frames: the staging buffers the listener holds never pass the
// budget, every byte lands, and nothing is held once it is done.
func TestReceiveBufferBounded(t *testing.T) {
	const frame, frames = 32 << 10, 64
	const size = frame * frames
	cfg := "connections_per_peer = 4\nmax_receive_buffer = \"64KiB\"\nmax_held_responses = 4"
	w := newWorld(t, size, cfg)
	bl := make([]byte, size)
	w.b.registerForeign(t, bForeign, bl, sdk.PermRemoteReadWrite)
	fill(bl[:size/2], 1)
	fill(w.src, 2)
	var tokens []uint64
	for i := range uint64(frames / 2) {
		off := i * frame
		tokens = append(tokens, w.submit(read(aDst, off, bForeign, off, frame)))                // the listener stages each payload
		tokens = append(tokens, w.submit(write(aSrc, size/2+off, bForeign, size/2+off, frame))) // and each write into the host
	}
	for _, tk := range tokens {
		if c := w.col.Wait(tk); c.Status != ring.StatusOK || c.N != frame {
			t.Fatalf("token %d: %v, %d bytes", tk, c.Status, c.N)
		}
	}
	plugintest.MustEqual(t, "read bytes", w.dst[:size/2], bl[:size/2])
	plugintest.MustEqual(t, "written bytes", bl[size/2:], w.src[size/2:])
	if peak := w.b.stat(t, "receive_buffer_peak"); peak == 0 || peak > 64<<10 {
		t.Errorf("receive_buffer_peak %d, want within the 64 KiB budget (and above 0)", peak)
	}
	if held := w.b.stat(t, "receive_buffer_held"); held != 0 {
		t.Errorf("receive_buffer_held %d after every transfer ended, want 0", held)
	}
}

func TestReceiveBoundsConfig(t *testing.T) {
	for _, c := range []struct{ config, want string }{
		{`max_held_responses = 0`, "ferry.hcl:10:24: tcp config: max_held_responses"},
		{`max_held_responses = 65`, "max_held_responses"},
		{`max_receive_buffer = "1KiB"`, "ferry.hcl:10:24: tcp config: max_receive_buffer: 1024 bytes is outside 64KiB..1TiB"},
		{`max_receive_buffer = "lots"`, "max_receive_buffer"},
	} {
		tr := tcp.New(tcp.WithLogger(hclog.NewNullLogger()))
		_, err := tr.Start(context.Background(), sdk.StartConfig{Engine: "e", Config: []byte(c.config), ConfigFile: "ferry.hcl", ConfigLine: 10, ConfigColumn: 3})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %q: error %v, want it to contain %q", c.config, err, c.want)
		}
		if err := tr.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	for _, good := range []string{`max_held_responses = 1`, `max_receive_buffer = "64KiB"`, `max_receive_buffer = "1GiB"`} {
		tr := tcp.New(tcp.WithLogger(hclog.NewNullLogger()))
		if _, err := tr.Start(context.Background(), sdk.StartConfig{Engine: "e", Config: []byte(good), ConfigFile: "ferry.hcl", ConfigLine: 10, ConfigColumn: 3}); err != nil {
			t.Errorf("config %q: %v", good, err)
		}
		if err := tr.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
