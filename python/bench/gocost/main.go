package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// size is the transfer's length: the 4 KiB.
const size = 4 << 10

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gocost:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	// Peer-to-peer, as the Python half: no metastore, the engine opens
	// its own segment by its control address; shm carries the bytes.
	cfg := config.Default(fmt.Sprintf("gocost-%d", os.Getpid()))
	cfg.Metastore = config.Metastore{Kind: config.MetastoreNone}
	if only := os.Getenv("GOCOST_PLUGINS"); only != "" {
		// The Python half's plugins (cost.py --plugins), e.g. "shm":
		// with one plugin the engine waits on its lane (Lane.WaitOn).
		cfg.Plugins = slices.DeleteFunc(cfg.Plugins, func(p config.Plugin) bool {
			return !slices.Contains(strings.Split(only, ","), p.Name)
		})
	}
	e, err := host.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	mem, err := e.Allocate(2 * size)
	if err != nil {
		return err
	}
	src, dst := mem[:size], mem[size:]
	for i := range src {
		src[i] = byte(i * 7)
	}
	if _, err := e.Register(ctx, src, host.LocalOnly); err != nil {
		return err
	}
	base, err := e.Register(ctx, dst, host.RemoteReadWrite)
	if err != nil {
		return err
	}
	seg, err := e.OpenSegment(ctx, e.ControlAddr())
	if err != nil {
		return err
	}
	req := host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: base, Transport: "shm"}

	// transfer: Engine.Transfer, the synchronous call (a batch of one
	// allocated, submitted, waited for and freed per call).
	transfer := func() error { return e.Transfer(ctx, req) }
	// batch: one batch kept across calls: Submit, Wait, then FreeBatch
	// and AllocateBatch again, as an asynchronous caller does.
	id, err := e.AllocateBatch(1)
	if err != nil {
		return err
	}
	batch := func() error {
		if err := e.Submit(id, req); err != nil {
			return err
		}
		if err := e.Wait(ctx, id); err != nil {
			return err
		}
		if st, _ := e.TaskStatus(id, 0); st.State != host.StateCompleted {
			return fmt.Errorf("task ended %v: %v", st.State, st.Err)
		}
		if err := e.FreeBatch(id); err != nil {
			return err
		}
		id, err = e.AllocateBatch(1)
		return err
	}

	in := bufio.NewScanner(os.Stdin)
	fmt.Println("ready")
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 2 {
			return fmt.Errorf("command %q: want \"transfer N\" or \"batch N\"", in.Text())
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n <= 0 {
			return fmt.Errorf("command %q: N must be a positive count", in.Text())
		}
		call := transfer
		switch f[0] {
		case "batch":
			call = batch
		case "transfer":
		case "transferq":
			clear(dst)
			line, err := perCall(transfer, n)
			if err != nil {
				return err
			}
			if dst[size-1] != src[size-1] || dst[0] != src[0] {
				return fmt.Errorf("the bytes did not land")
			}
			fmt.Println(line)
			continue
		default:
			return fmt.Errorf("command %q: unknown; want transfer, transferq or batch", f[0])
		}
		clear(dst)
		start := time.Now()
		for range n {
			if err := call(); err != nil {
				return err
			}
		}
		ns := float64(time.Since(start).Nanoseconds()) / float64(n)
		if dst[size-1] != src[size-1] || dst[0] != src[0] {
			return fmt.Errorf("the bytes did not land")
		}
		fmt.Printf("%.1f\n", ns)
	}
	return in.Err()
}

// perCall times each of n calls on its own and returns "mean p10 p50" in
// nanoseconds, less the cost of the timing itself (the median of empty
// timed windows): the quantiles survive a loaded machine's preemptions,
// which a mean over the round does not.
func perCall(call func() error, n int) (string, error) {
	ds := make([]int64, n)
	for i := range ds {
		t0 := time.Now()
		ds[i] = int64(time.Since(t0))
	}
	slices.Sort(ds)
	tick := ds[n/2]
	var sum int64
	for i := range ds {
		t0 := time.Now()
		if err := call(); err != nil {
			return "", err
		}
		ds[i] = int64(time.Since(t0)) - tick
		sum += ds[i]
	}
	slices.Sort(ds)
	return fmt.Sprintf("%.1f %d %d", float64(sum)/float64(n), ds[n/10], ds[n/2]), nil
}
