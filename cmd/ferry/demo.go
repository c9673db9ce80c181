package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// cmdDemo is the main job on the embedded defaults: this process runs an
// engine with the embedded metastore, a second process runs a target
// engine, and every transport both have moves data in both directions at
// sizes from 1 byte to 64 MiB at odd offsets. Reads are checked against
// the target's known pattern, writes against sha256 sums the target
// computes over its own memory.
func cmdDemo(args []string) error {
	fs := flag.NewFlagSet("demo", flag.ExitOnError)
	cfgPath := fs.String("config", "", "initiator config (default: built-in single-node config)")
	maxStr := fs.String("max", "64MiB", "largest transfer")
	lf := addLogFlags(fs)
	fs.Parse(args)
	maxSize, err := config.ParseSize(*maxStr)
	if err != nil {
		return err
	}
	ctx := context.Background()
	e, err := newEngine(ctx, *cfgPath, fmt.Sprintf("demo-a-%d", os.Getpid()), "", lf)
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Printf("engine %s up, metastore %s\n", e.Name(), e.MetastoreURL())
	const seed = 7
	span := int(maxSize) + 64
	name := fmt.Sprintf("demo-b-%d", os.Getpid())
	t, err := startTarget(append([]string{"--name", name, "--metastore", e.MetastoreURL(), "--expose", fmt.Sprint(span), "--pattern", fmt.Sprint(seed)}, lf.args()...)...)
	if err != nil {
		return err
	}
	defer t.stop()
	fmt.Printf("engine %s up in process %d\n", name, t.cmd.Process.Pid)
	seg, err := e.OpenSegment(ctx, name)
	if err != nil {
		return err
	}
	remote := seg.Buffers[0].Base
	local, err := e.Allocate(span)
	if err != nil {
		return err
	}
	if _, err := e.Register(ctx, local, host.LocalOnly); err != nil {
		return err
	}
	sizes := []int{1, 7, 4096 + 3, 65536 + 1, 1<<20 + 5, 16 << 20, int(maxSize)}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nTRANSPORT\tOP\tBYTES\tLOCAL OFF\tREMOTE OFF\tRATE (one transfer)\tVERIFIED")
	failures := 0
	for _, tr := range seg.Transports {
		for _, n := range sizes {
			if n > int(maxSize) {
				continue
			}
			loff, roff := 3, 5
			// Read a range of the target's pattern and check it here.
			dst := local[loff : loff+n]
			clear(dst)
			t0 := time.Now()
			err := e.Transfer(ctx, host.Request{Op: host.Read, Local: dst, Segment: seg.ID, Remote: remote + uint64(roff), Transport: tr})
			el := time.Since(t0)
			want := make([]byte, n)
			Pattern(want, uint64(roff), seed)
			ok := err == nil && bytes.Equal(dst, want)
			failures += row(tw, tr, "read", n, loff, roff, el, ok, err)

			// Write random bytes and have the target hash its copy.
			src := local[loff : loff+n]
			rand.Read(src)
			t0 = time.Now()
			err = e.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: remote + uint64(roff), Transport: tr})
			el = time.Since(t0)
			ok = false
			if err == nil {
				sum := sha256.Sum256(src)
				got, aerr := t.ask(fmt.Sprintf("sha256 %d %d", roff, n))
				ok, err = aerr == nil && got == hex.EncodeToString(sum[:]), aerr
			}
			failures += row(tw, tr, "write", n, loff, roff, el, ok, err)
			if _, err := t.ask(fmt.Sprintf("fill %d", seed)); err != nil {
				return err
			}
		}
	}
	tw.Flush()
	for _, p := range e.Status(ctx).Plugins {
		fmt.Printf("plugin %-6s %s", p.Name, p.State)
		if p.Reason != "" {
			fmt.Printf(": %s", p.Reason)
		}
		var keys []string
		for k := range p.Counters {
			if strings.HasPrefix(k, "bytes_") {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Printf(" %s=%d", k, p.Counters[k])
		}
		fmt.Println()
	}
	if failures > 0 {
		return fmt.Errorf("%d transfers failed verification", failures)
	}
	fmt.Println("all transfers verified")
	return nil
}

func row(tw *tabwriter.Writer, tr, op string, n, loff, roff int, el time.Duration, ok bool, err error) int {
	v := "sha256 ok"
	if op == "read" {
		v = "pattern ok"
	}
	if !ok {
		v = "FAILED"
		if err != nil {
			v += ": " + err.Error()
		}
	}
	fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", tr, op, n, loff, roff, rateText(uint64(n), el), v)
	if ok {
		return 0
	}
	return 1
}

// rateText is n bytes in d as a rate in the decimal unit (B/s, kB/s,
// MB/s, GB/s) that shows it with three significant digits: a 1-byte
// transfer reads "45.2 kB/s", not "0.000" GB/s.
func rateText(n uint64, d time.Duration) string {
	if d <= 0 {
		return "n/a"
	}
	r := float64(n) / d.Seconds()
	unit := "B/s"
	for _, u := range []string{"kB/s", "MB/s", "GB/s", "TB/s"} {
		if r < 999.5 { // what %.0f would print as 1000
			break
		}
		r, unit = r/1000, u
	}
	switch {
	case r >= 100:
		return fmt.Sprintf("%.0f %s", r, unit)
	case r >= 10:
		return fmt.Sprintf("%.1f %s", r, unit)
	}
	return fmt.Sprintf("%.2f %s", r, unit)
}
