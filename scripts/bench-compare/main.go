package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// row is one bench configuration.
type row struct {
	Transport string
	Op        string
	Size      int64
	Batch     int
	Threads   int
}

func (r row) String() string {
	return fmt.Sprintf("%s/%s/%s/b%d/t%d", r.Transport, r.Op, sizeName(r.Size), r.Batch, r.Threads)
}

// total is the bytes of one side's buffers: size*batch*threads.
func (r row) total() int64 { return r.Size * int64(r.Batch) * int64(r.Threads) }

func sizeName(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return strconv.FormatInt(n, 10)
}

// mainRows are issue 10's rows: tcp and shm; 4 KiB, 64 KiB, 1 MiB and
// 64 MiB; batch 1 and 128; threads 1 and 2.
func mainRows(ops []string) []row {
	var rows []row
	for _, tr := range []string{"tcp", "shm"} {
		for _, op := range ops {
			for _, size := range []int64{4 << 10, 64 << 10, 1 << 20, 64 << 20} {
				for _, batch := range []int{1, 128} {
					for _, threads := range []int{1, 2} {
						rows = append(rows, row{tr, op, size, batch, threads})
					}
				}
			}
		}
	}
	return rows
}

// benchLimit is what `ferry bench` refuses: more than 8 GiB of buffers
// (size*batch*threads) on one side.
const benchLimit = 8 << 30

// buffersPerSide is how many size*batch*threads buffers a bench run holds
// at once, the most of any build: Ferry's local buffer, the target
// engine's exposed buffer, and the baseline's two (memcpy's source and
// destination, or the tcp baseline's initiator and peer buffers). Older
// builds hold fewer (their baselines did not write theirs); the plan
// assumes the most so that no build is the one to run out.
const buffersPerSide = 4

// skipReason says why r cannot run on a machine with avail bytes of
// memory available, or "" when it can.
func skipReason(r row, avail int64) string {
	if r.total() > benchLimit {
		return fmt.Sprintf("size*batch*threads = %s is over the 8 GiB that ferry bench accepts", gib(r.total()))
	}
	need := buffersPerSide * r.total()
	if float64(need) > 0.8*float64(avail) {
		return fmt.Sprintf("needs about %s of buffers (%d × size*batch*threads = %s: Ferry's, the target's and the baseline's two), over 80%% of the %s available; use a machine with more memory or --mem",
			gib(need), buffersPerSide, gib(r.total()), gib(avail))
	}
	return ""
}

func gib(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30)) }

// benchRow is the part of a bench line this tool reads. Verified is nil
// for builds from before the bench verified its bytes.
type benchRow struct {
	Gbps         float64 `json:"gbps"`
	P50us        float64 `json:"p50_us"`
	Ratio        float64 `json:"ratio"`
	LatencyRatio float64 `json:"latency_ratio"`
	Baseline     string  `json:"baseline"`
	BaselineGbps float64 `json:"baseline_gbps"`
	Verified     *bool   `json:"verified"`
}

// record is one line of --out.
type record struct {
	Bin   string          `json:"bin"`
	Run   int             `json:"run"`
	Case  string          `json:"case"`
	Row   json.RawMessage `json:"row,omitempty"`
	Error string          `json:"error,omitempty"`
}

// stat is the median and range of one figure over a build's runs.
type stat struct{ med, min, max float64 }

func summarize(xs []float64) (stat, bool) {
	if len(xs) == 0 {
		return stat{}, false
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{m, s[0], s[len(s)-1]}, true
}

func (s stat) format(prec int) string {
	return fmt.Sprintf("%.*f [%.*f–%.*f]", prec, s.med, prec, s.min, prec, s.max)
}

type bin struct{ name, ferry string }

// parseBin reads NAME=PATH; PATH is a directory with `ferry` in it or the
// binary itself.
func parseBin(s string) (bin, error) {
	name, path, ok := strings.Cut(s, "=")
	if !ok || name == "" || path == "" {
		return bin{}, fmt.Errorf("--bin %q: want NAME=PATH (a directory holding ferry and its plugins, or the ferry binary)", s)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return bin{}, fmt.Errorf("--bin %s: %w", name, err)
	}
	if fi.IsDir() {
		path = filepath.Join(path, "ferry")
		if _, err := os.Stat(path); err != nil {
			return bin{}, fmt.Errorf("--bin %s: %w (run `make build` there)", name, err)
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return bin{}, fmt.Errorf("--bin %s: %w", name, err)
	}
	return bin{name, abs}, nil
}

type binList []bin

func (b *binList) String() string { return fmt.Sprint(*b) }
func (b *binList) Set(s string) error {
	x, err := parseBin(s)
	if err != nil {
		return err
	}
	for _, y := range *b {
		if y.name == x.name {
			return fmt.Errorf("--bin %s given twice", x.name)
		}
	}
	*b = append(*b, x)
	return nil
}

// memAvailable reads MemAvailable from /proc/meminfo.
func memAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("/proc/meminfo has no MemAvailable line")
}

// runOnce runs one bench of r with b and returns its JSON line.
func runOnce(ctx context.Context, b bin, r row, duration, warmup time.Duration) ([]byte, error) {
	args := []string{"bench", "--transport", r.Transport, "--op", r.Op, "--size", strconv.FormatInt(r.Size, 10),
		"--batch", strconv.Itoa(r.Batch), "--threads", strconv.Itoa(r.Threads), "--duration", duration.String(), "--json"}
	if warmup > 0 {
		args = append(args, "--warmup", warmup.String())
	}
	// Ferry and the baseline each run duration plus two warm-ups; the
	// rest is starting two engines, filling and checking buffers.
	limit := 2*duration + 4*max(warmup, 500*time.Millisecond) + 3*time.Minute
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.ferry, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	line := lastLine(stdout.Bytes())
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		if ctx.Err() != nil {
			msg = fmt.Sprintf("killed after %s; %s", limit, msg)
		}
		return line, fmt.Errorf("%s %s: %w: %s", b.name, strings.Join(args, " "), err, msg)
	}
	if !json.Valid(line) {
		return nil, fmt.Errorf("%s %s: printed %q, want one JSON row", b.name, strings.Join(args, " "), stdout.String())
	}
	return line, nil
}

func lastLine(b []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	return bytes.TrimSpace(lines[len(lines)-1])
}

// printTable prints one row's figures per build.
func printTable(w io.Writer, r row, bins []bin, got map[string][]benchRow, errs map[string]int) {
	fmt.Fprintf(w, "\n== %s\n", r)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BIN\tRUNS\tGB/s med [min–max]\tP50 us med [min–max]\tRATIO med [min–max]\tLAT RATIO med [min–max]\tBASELINE\tBASE GB/s med\tVERIFIED")
	for _, b := range bins {
		rows := got[b.name]
		var gbps, p50, ratio, lat, base []float64
		verified, unverified := 0, 0
		baseName := ""
		for _, x := range rows {
			gbps, p50 = append(gbps, x.Gbps), append(p50, x.P50us)
			if x.Baseline != "" {
				ratio, lat, base = append(ratio, x.Ratio), append(lat, x.LatencyRatio), append(base, x.BaselineGbps)
				baseName = x.Baseline
			}
			if x.Verified != nil {
				if *x.Verified {
					verified++
				} else {
					unverified++
				}
			}
		}
		cell := func(xs []float64, prec int) string {
			if s, ok := summarize(xs); ok {
				return s.format(prec)
			}
			return "-"
		}
		v := "not checked (old bench)"
		if verified+unverified > 0 {
			v = fmt.Sprintf("%d/%d", verified, verified+unverified)
		}
		runs := strconv.Itoa(len(rows))
		if errs[b.name] > 0 {
			runs += fmt.Sprintf(" (+%d failed)", errs[b.name])
		}
		bs, _ := summarize(base)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.3f\t%s\n", b.name, runs, cell(gbps, 3), cell(p50, 1), cell(ratio, 3), cell(lat, 3), baseName, bs.med, v)
	}
	tw.Flush()
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench-compare: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("bench-compare", flag.ContinueOnError)
	var bins binList
	fs.Var(&bins, "bin", "NAME=PATH of a build: a directory with ferry and its plugins, or the ferry binary (2 or 3 times)")
	runs := fs.Int("runs", 3, "runs of each build per row, interleaved")
	duration := fs.Duration("duration", 2*time.Second, "--duration of each bench run (Ferry and the baseline each)")
	warmup := fs.Duration("warmup", 0, "--warmup of each bench run (0: the bench's default)")
	filter := fs.String("rows", "", "regexp; run only rows whose name (e.g. shm/write/64MiB/b1/t1) matches")
	ops := fs.String("ops", "write", "comma-separated ops to run each row with (write, read)")
	out := fs.String("out", "", "file for the raw JSON lines (default bench-compare-<time>.jsonl)")
	memGiB := fs.Float64("mem", 0, "GiB of memory to plan for (default: MemAvailable now)")
	dry := fs.Bool("plan", false, "print the rows that would run and those skipped, and run nothing")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if len(bins) < 1 || len(bins) > 3 {
		return fmt.Errorf("give 2 or 3 builds with --bin NAME=PATH (1 to check the script itself); got %d", len(bins))
	}
	if *runs < 1 {
		return fmt.Errorf("--runs %d: want at least 1", *runs)
	}
	re, err := regexp.Compile(*filter)
	if err != nil {
		return fmt.Errorf("--rows: %w", err)
	}
	avail := int64(*memGiB * (1 << 30))
	if avail <= 0 {
		if avail, err = memAvailable(); err != nil {
			return fmt.Errorf("find the memory available (give --mem GiB): %w", err)
		}
	}
	var plan []row
	for _, r := range mainRows(strings.Split(*ops, ",")) {
		if !re.MatchString(r.String()) {
			continue
		}
		if why := skipReason(r, avail); why != "" {
			fmt.Fprintf(stdout, "skip %s: %s\n", r, why)
			continue
		}
		plan = append(plan, r)
	}
	per := 2**duration + 4*max(*warmup, 500*time.Millisecond) + 2*time.Second
	fmt.Fprintf(stdout, "%d rows × %d builds × %d runs, about %s (each run about %s)\n",
		len(plan), len(bins), *runs, (time.Duration(len(plan)*len(bins)**runs) * per).Round(time.Minute), per.Round(time.Second))
	if *dry {
		for _, r := range plan {
			fmt.Fprintf(stdout, "run %s\n", r)
		}
		return nil
	}
	if *out == "" {
		*out = fmt.Sprintf("bench-compare-%s.jsonl", time.Now().UTC().Format("20060102T150405Z"))
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	defer f.Close()
	rec := bufio.NewWriter(f)
	fmt.Fprintf(stdout, "raw rows: %s\n", *out)

	ctx := context.Background()
	failed := 0
	for _, r := range plan {
		got := map[string][]benchRow{}
		errs := map[string]int{}
		for i := range *runs {
			for _, b := range bins {
				line, err := runOnce(ctx, b, r, *duration, *warmup)
				x := record{Bin: b.name, Run: i + 1, Case: r.String()}
				if json.Valid(line) {
					x.Row = line
				}
				if err != nil {
					x.Error = err.Error()
					errs[b.name]++
					failed++
					fmt.Fprintf(os.Stderr, "bench-compare: %v\n", err)
				} else {
					var br benchRow
					if err := json.Unmarshal(line, &br); err != nil {
						return fmt.Errorf("%s %s run %d: %w", b.name, r, i+1, err)
					}
					got[b.name] = append(got[b.name], br)
				}
				enc, _ := json.Marshal(x)
				rec.Write(append(enc, '\n'))
			}
		}
		if err := rec.Flush(); err != nil {
			return fmt.Errorf("write %s: %w", *out, err)
		}
		printTable(stdout, r, bins, got, errs)
	}
	if failed > 0 {
		return fmt.Errorf("%d bench runs failed (their errors are above and in %s)", failed, *out)
	}
	return nil
}
