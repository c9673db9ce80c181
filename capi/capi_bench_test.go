package main_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// BenchmarkTransfer4KiB is the Go side of examples/c/bench_transfer.c:
// one synchronous 4 KiB write (Engine.Transfer) over shm to the engine's
// own segment. The difference between the two is the C boundary's cost.
func BenchmarkTransfer4KiB(b *testing.B) {
	const size = 4096
	ctx := context.Background()
	cfg := config.Default(fmt.Sprintf("go-bench-%d", time.Now().UnixNano()))
	cfg.Plugins = slices.DeleteFunc(cfg.Plugins, func(p config.Plugin) bool { return p.Name != "shm" }) // as the C side
	e, err := host.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	mem, err := e.Allocate(2 * size)
	if err != nil {
		b.Fatal(err)
	}
	src, dst := mem[:size], mem[size:]
	if _, err := e.Register(ctx, src, host.LocalOnly); err != nil {
		b.Fatal(err)
	}
	base, err := e.Register(ctx, dst, host.RemoteReadWrite)
	if err != nil {
		b.Fatal(err)
	}
	seg, err := e.OpenSegment(ctx, e.Name())
	if err != nil {
		b.Fatal(err)
	}
	r := host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: base, Transport: "shm"}
	for range 1000 {
		if err := e.Transfer(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := e.Transfer(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBatchStatus is the Go side of bench_transfer.c's second
// figure: Engine.BatchStatus of a batch of one ended task, a call with
// next to no work, so that the C one less this is the boundary's cost.
func BenchmarkBatchStatus(b *testing.B) {
	ctx := context.Background()
	cfg := config.Default(fmt.Sprintf("go-bench-%d", time.Now().UnixNano()))
	cfg.Plugins = slices.DeleteFunc(cfg.Plugins, func(p config.Plugin) bool { return p.Name != "shm" })
	e, err := host.New(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	id, err := e.AllocateBatch(1)
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Submit(id, host.Request{Op: host.Write}); err != nil { // ends INVALID: a task, no transfer
		b.Fatal(err)
	}
	if err := e.Wait(ctx, id); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if s, err := e.BatchStatus(id); err != nil || s.Tasks != 1 {
			b.Fatal(s, err)
		}
	}
}

// TestCBench runs examples/c/bench_transfer.c briefly: it builds, moves
// verified bytes through ferry_transfer and prints its figure.
func TestCBench(t *testing.T) {
	out := run(t, compile(t, "bench_transfer"), "200")
	if !regexp.MustCompile(`^ns/op \d+ \(rounds:( \d+){5}; 200 transfers each\)\nstatus ns/op \d+ \(rounds:( \d+){5}; 4000 calls each\)\n$`).MatchString(out) {
		t.Errorf("bench_transfer printed %q", out)
	}
}
