package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/cmd/ferry/internal/soak"
	"github.com/ferrydev/ferry/config"
)

// cmdSoak runs `ferry soak`: verified traffic between this process's
// engine and a target engine it starts, with faults; see docs/soak.md.
func cmdSoak(args []string) error {
	fs := flag.NewFlagSet("soak", flag.ExitOnError)
	duration := fs.Duration("duration", 60*time.Second, "how long traffic runs")
	warmup := fs.Duration("warmup", 0, "traffic before the first fault; the drift baseline is sampled at its end (default: a sixth of --duration, at most 30s)")
	seed := fs.Uint64("seed", 0, "seed of the traffic and the faults (0: from the clock); the report prints it")
	gap := fs.String("gap", "20s-40s", "random pause before each fault, MIN-MAX")
	faults := fs.String("faults", "kill,stop,restart-target,restart-metastore", "fault kinds, comma-separated: "+strings.Join(soak.AllKinds, ", ")+" (the link kinds need --netns); \"none\" for none")
	maxFaults := fs.Int("max-faults", 0, "inject at most this many faults (0: as many as the gaps allow)")
	stopFor := fs.Duration("stop-for", 8*time.Second, "how long a stop fault keeps a plugin stopped, and a link fault the link slow or down")
	transports := fs.String("transports", "tcp,shm", "transports the traffic uses (pinned per request, at random): tcp, shm or both")
	workers := fs.Int("workers", 3, "concurrent workers, each with its own range of the target's buffer")
	span := fs.String("span", "24MiB", "bytes of the target's buffer each worker owns")
	maxSize := fs.String("max-size", "16MiB", "largest request (sizes are random from 4KiB, log-uniform)")
	deadline := fs.Duration("deadline", 10*time.Second, "deadline of the requests that are not short")
	short := fs.Float64("short-deadlines", 0.1, "share of write batches with a deadline of 1-30ms, so that they expire")
	cancels := fs.Float64("cancels", 0.1, "share of write batches canceled (a task or the batch) 0-5ms after submission")
	stallAfter := fs.Duration("stall-after", time.Second, "both engines' supervise.stall_after")
	probeTimeout := fs.Duration("probe-timeout", 500*time.Millisecond, "both engines' supervise.probe_timeout")
	interval := fs.Duration("supervise-interval", 100*time.Millisecond, "both engines' supervise.interval")
	endGrace := fs.Duration("end-grace", 2*time.Second, "both engines' supervise.end_grace")
	maxFD := fs.Int("max-fd-drift", 8, "fail when the initiator's FDs end more than this above the baseline")
	maxGor := fs.Int("max-goroutine-drift", 30, "fail when the initiator's goroutines end more than this above the baseline")
	maxRSS := fs.Float64("max-rss-growth", 0.25, "fail when the initiator's RSS ends more than this share above the baseline (0.05 = 5%)")
	series := fs.String("series", "", "write the initiator's FDs, goroutines and RSS, one row a second, and the faults, to this CSV file")
	plot := fs.String("plot", "", "draw the --series data (FDs, goroutines, RSS; faults dashed) into this PNG")
	dumpDir := fs.String("dump-dir", ".", "where the watchdog writes goroutine stacks when no call returns for 20s")
	asJSON := fs.Bool("json", false, "print the report as JSON instead of tables")
	netns := fs.Bool("netns", false, "run the target in a network namespace of its own, over a veth that the link faults slow or set down (needs root)")
	slowRate := fs.String("slow-rate", "2mbit", "tc tbf rate of a slow-link fault")
	inNetns := fs.String("in-netns", "", "(internal) the namespaces a --netns run made; this run is inside the first")
	lf := addLogFlags(fs)
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	exe, err := os.Executable()
	if err != nil {
		return err
	}
	o := soak.Options{Ferry: exe, Duration: *duration, Warmup: *warmup, Seed: *seed, MaxFaults: *maxFaults, StopFor: *stopFor,
		Workers: *workers, Deadline: *deadline, ShortDeadlines: *short, Cancels: *cancels, SlowRate: *slowRate,
		Series: *series, Plot: *plot, DumpDir: *dumpDir, LogArgs: lf.args(), Logs: os.Stderr, Out: os.Stderr,
		Limits:    soak.Thresholds{FDs: *maxFD, Goroutines: *maxGor, RSSGrowth: *maxRSS},
		Supervise: config.Supervise{StallAfter: *stallAfter, ProbeTimeout: *probeTimeout, Interval: *interval, EndGrace: *endGrace}}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano()) % 1_000_000
	}
	if o.Warmup == 0 {
		o.Warmup = min(*duration/6, 30*time.Second)
	}
	if o.GapMin, o.GapMax, err = parseGap(*gap); err != nil {
		return err
	}
	if o.Span, err = config.ParseSize(*span); err != nil {
		return fmt.Errorf("--span: %w", err)
	}
	if o.MaxSize, err = config.ParseSize(*maxSize); err != nil {
		return fmt.Errorf("--max-size: %w", err)
	}
	o.Transports = splitList(*transports)
	if *faults != "none" {
		o.Kinds = splitList(*faults)
	}
	if o.Logger, err = lf.logger(); err != nil {
		return err
	}
	if *plot != "" && *series == "" {
		o.Series = filepath.Join(os.TempDir(), fmt.Sprintf("ferry-soak-%d.csv", os.Getpid()))
	}

	var notes []string
	links := slices.ContainsFunc(o.Kinds, func(k string) bool { return k == soak.KindSlowLink || k == soak.KindDownLink })
	switch {
	case *inNetns != "":
		if o.Netns, err = soak.ParseNetns(*inNetns); err != nil {
			return err
		}
		if slices.Contains(o.Transports, "shm") {
			o.Transports = slices.DeleteFunc(o.Transports, func(t string) bool { return t == "shm" })
			notes = append(notes, "--netns: the engines are in two network namespaces, so shm does not reach across; tcp only")
		}
		if len(o.Transports) == 0 {
			return errors.New("--netns carries tcp only; --transports has no tcp")
		}
	case *netns && os.Geteuid() != 0:
		notes = append(notes, fmt.Sprintf("--netns needs root (euid %d): both engines on loopback, link faults skipped", os.Geteuid()))
		o.Kinds = withoutLinks(o.Kinds)
	case *netns:
		return reexecInNetns(exe, args)
	case links:
		notes = append(notes, "slow-link and down-link need --netns (and root): skipped")
		o.Kinds = withoutLinks(o.Kinds)
	}
	for _, n := range notes {
		fmt.Fprintf(os.Stderr, "ferry soak: %s\n", n)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := soak.Run(ctx, o)
	if rep == nil {
		return err
	}
	rep.Notes = append(notes, rep.Notes...)
	if *asJSON {
		b, _ := json.MarshalIndent(rep, "", "  ")
		fmt.Println(string(b))
	} else {
		rep.WriteText(os.Stdout)
	}
	if *series != "" {
		fmt.Fprintf(os.Stderr, "wrote %s\n", *series)
	}
	if *plot != "" && err == nil {
		fmt.Fprintf(os.Stderr, "wrote %s\n", *plot)
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return fmt.Errorf("FAILED: %s", strings.Join(rep.Failures, "; "))
	}
	return nil
}

func withoutLinks(kinds []string) []string {
	return slices.DeleteFunc(slices.Clone(kinds), func(k string) bool { return k == soak.KindSlowLink || k == soak.KindDownLink })
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// parseGap reads --gap: "20s-40s", or one duration for a fixed gap.
func parseGap(s string) (lo, hi time.Duration, err error) {
	a, b, found := strings.Cut(s, "-")
	if lo, err = time.ParseDuration(a); err != nil {
		return 0, 0, fmt.Errorf("--gap %q: %w", s, err)
	}
	hi = lo
	if found {
		if hi, err = time.ParseDuration(b); err != nil {
			return 0, 0, fmt.Errorf("--gap %q: %w", s, err)
		}
	}
	if lo <= 0 || hi < lo {
		return 0, 0, fmt.Errorf("--gap %q: want MIN-MAX with 0 < MIN <= MAX", s)
	}
	return lo, hi, nil
}

// reexecInNetns makes the namespaces of a --netns run, runs this soak
// again inside the first (the target goes into the second), and removes
// them afterwards.
func reexecInNetns(exe string, args []string) error {
	n, cleanup, err := soak.NetnsSetup()
	if err != nil {
		return err
	}
	defer cleanup()
	var rest []string
	for _, a := range args {
		if a != "--netns" && a != "-netns" && a != "--netns=true" && a != "-netns=true" {
			rest = append(rest, a)
		}
	}
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.A, exe, "soak", "--in-netns", n.String()}, rest...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	signal.Ignore(os.Interrupt) // the child gets it too, and reports
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			cleanup()
			os.Exit(ee.ExitCode())
		}
		return err
	}
	return nil
}
