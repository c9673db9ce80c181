package examples

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// MoveBlock is the README's "Using it": a decode engine that serves the
// metastore and exposes its KV memory, and a prefill engine that joins
// that metastore and writes a block into it. Real deployments run them
// as two processes; the code in each is the same.
func MoveBlock(ctx context.Context) error {
	// The decode side: it embeds the metastore (config.Default does) and
	// exposes memory that peers may write.
	decode, err := host.New(ctx, config.Default("decode-0"))
	if err != nil {
		return err // names the plugin or setting that failed, and what to do
	}
	defer decode.Close()
	kv, err := decode.Allocate(1 << 20) // shared memory the plugins map: zero copy
	if err != nil {
		return err
	}
	if _, err := decode.Register(ctx, kv, host.RemoteReadWrite); err != nil {
		return err
	}

	// The prefill side: it joins decode's metastore, so that it finds
	// "decode-0" by name.
	cfg := config.Default("prefill-0")
	cfg.Metastore = config.Metastore{Kind: config.MetastoreHTTP, URL: decode.MetastoreURL()}
	prefill, err := host.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer prefill.Close()
	block, err := prefill.Allocate(4096)
	if err != nil {
		return err
	}
	if _, err := prefill.Register(ctx, block, host.LocalOnly); err != nil {
		return err
	}
	rand.Read(block)

	seg, err := prefill.OpenSegment(ctx, "decode-0")
	if err != nil {
		return err
	}
	err = prefill.Transfer(ctx, host.Request{
		Op: host.Write, Local: block,
		Segment: seg.ID, Remote: seg.Buffers[0].Base, // the owner's address, as in TENT
		Deadline: time.Now().Add(5 * time.Second),
	})
	if err != nil {
		return err
	}
	if !bytes.Equal(kv[:len(block)], block) {
		return fmt.Errorf("decode holds other bytes than prefill wrote")
	}
	fmt.Printf("wrote %d bytes from %s to %s, verified\n", len(block), prefill.Name(), seg.Name)
	return nil
}
