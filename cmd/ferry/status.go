package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/control"
	"github.com/ferrydev/ferry/host/selector"
)

// statusFlags are the flags of status and top: which engine, and the
// config whose cluster secret the control service wants.
type statusFlags struct {
	engine, config, metastore *string
	asJSON                    *bool
}

func addStatusFlags(fs *flag.FlagSet) statusFlags {
	return statusFlags{
		engine:    fs.String("engine", "", "the engine (required): its control address, host:port (its ready line's \"control\"), or its name, looked up in --config's metastore or --metastore's"),
		config:    fs.String("config", "", "the engine's (or any cluster member's) config: its metastore, to find --engine by name, and its cluster secret (default: the file $FERRY_CLUSTER_SECRET_FILE names, if set)"),
		metastore: fs.String("metastore", "", "find --engine by name in this metastore instead of --config's: "+config.MetastoreURLForms),
		asJSON:    fs.Bool("json", false, "print the status as JSON"),
	}
}

// dial opens the engine's control service; addr is its control address,
// name the engine as --engine gave it, for messages.
func (f statusFlags) dial() (c *control.Client, addr, name string, err error) {
	if *f.engine == "" {
		return nil, "", "", fmt.Errorf("--engine is required: the engine's control address (host:port) or its name")
	}
	var o control.Options
	var meta *config.Metastore
	var cfg *config.Config
	where := "--metastore"
	if *f.config != "" || *f.metastore != "" {
		if cfg, err = loadConfig(*f.config, "", *f.metastore); err != nil {
			return nil, "", "", err
		}
		meta = &cfg.Metastore
		if *f.config != "" && *f.metastore == "" {
			where = *f.config
		}
	}
	if o.Secret, err = dialSecret(cfg); err != nil {
		return nil, "", "", err
	}
	if addr, err = resolveEngine(context.Background(), *f.engine, meta, where, o.Secret); err != nil {
		return nil, "", "", err
	}
	name = *f.engine
	if name != addr {
		name += " at " + addr
	}
	c, err = control.DialOptions(addr, o)
	return c, addr, name, err
}

// secretHint is what a refused control call adds: where the secret
// comes from.
const secretHint = "The engine's cluster secret comes from its --config, else from the file $" + config.SecretFileEnv +
	" names (an engine on the built-in config that started without it has a secret of its own: start it with FERRY_CLUSTER_SECRET_FILE set, here too)"

// dialSecret is the cluster secret to call an engine's control service
// with: that of cfg, loaded by loadConfig from --config (and
// --metastore), else the one $FERRY_CLUSTER_SECRET_FILE names (an engine
// from the default config has it), else none. loadConfig gives the
// built-in config joined to a --metastore no generated secret, so such
// a cfg has the same as none.
func dialSecret(cfg *config.Config) ([]byte, error) {
	if cfg == nil {
		cfg = &config.Config{ClusterSecretFile: os.Getenv(config.SecretFileEnv)}
	}
	return host.ClusterSecret(cfg)
}

// fetchStatus asks the engine at addr for its status and checks that it
// is one this ferry can read.
func fetchStatus(c *control.Client, addr string) (host.EngineStatus, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	b, err := c.Status(ctx)
	if err != nil {
		return host.EngineStatus{}, nil, fmt.Errorf("%w; is a Ferry engine serving its control service at %s? %s", err, addr, secretHint)
	}
	st, err := decodeStatus(b, addr)
	return st, b, err
}

// decodeStatus reads the status b of the engine at addr: of this ferry's
// StatusFormat, or of format 1, whose keys differ only in spelling
// (encoding/json matches "Counters" and "Name" to their snake_case tags
// by itself; "PausedUntil" is read here).
func decodeStatus(b []byte, addr string) (host.EngineStatus, error) {
	var st host.EngineStatus
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("engine at %s answered a status this ferry cannot read (%v): is it a Ferry engine?", addr, err)
	}
	switch st.Format {
	case host.StatusFormat:
	case 1:
		var old struct {
			Rails []struct{ PausedUntil time.Time }
		}
		if err := json.Unmarshal(b, &old); err == nil && len(old.Rails) == len(st.Rails) {
			for i := range st.Rails {
				st.Rails[i].PausedUntil = old.Rails[i].PausedUntil
			}
		}
	default:
		return st, fmt.Errorf("engine %q at %s reports status format %d; this ferry reads formats 1 and %d: use the ferry binary of the engine's version (ferry version)",
			st.Name, addr, st.Format, host.StatusFormat)
	}
	return st, nil
}

func cmdStatus(args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	f := addStatusFlags(fs)
	traces := fs.Bool("traces", false, "also print the story of each traced task (the engine needs a trace block; requests ask with Request.Trace)")
	fs.Parse(args)
	c, addr, _, err := f.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	st, raw, err := fetchStatus(c, addr)
	if err != nil {
		return err
	}
	if *f.asJSON {
		_, err := fmt.Println(string(raw))
		return err
	}
	if err := printStatus(os.Stdout, st, nil, 0); err != nil {
		return err
	}
	if *traces {
		printTraces(os.Stdout, st.Traces)
	}
	return nil
}

// printTraces writes each traced task's story: its stages with their
// times, transports and attempts, the selector's reasons under each
// route, and each failed attempt's cause.
func printTraces(w io.Writer, traces []host.TaskTrace) {
	if len(traces) == 0 {
		fmt.Fprintln(w, "\nno traced tasks (add a trace block to the engine's config; requests ask with Request.Trace, or set sample_every)")
		return
	}
	for _, tr := range traces {
		end := "in progress"
		if tr.Done {
			end = fmt.Sprintf("ended in %.1f µs", tr.Took)
		}
		fmt.Fprintf(w, "\ntask %d of batch %d: %s %d bytes, priority %s, started %s, %s\n",
			tr.Task, tr.Batch, tr.Op, tr.Length, tr.Priority, tr.Started.Format(time.TimeOnly), end)
		for _, s := range tr.Steps {
			line := fmt.Sprintf("  %+10.1f µs  %-9s attempt %d", s.At, s.Stage, s.Attempt)
			if s.Transport != "" {
				line += "  " + s.Transport
			}
			if s.Slices != 0 {
				line += fmt.Sprintf("  %d slices", s.Slices)
			}
			for _, kv := range [][2]string{{"status", s.Status}, {"state", s.State}, {"from", s.From}, {"cause", s.Cause}, {"error", s.Err}} {
				if kv[1] != "" {
					line += "  " + kv[0] + " " + kv[1]
				}
			}
			fmt.Fprintln(w, line)
			for _, r := range strings.Split(strings.TrimSpace(s.Reasons), "\n") {
				if r != "" {
					fmt.Fprintln(w, "                 | "+r)
				}
			}
		}
	}
}

func cmdTop(args []string) error {
	fs := flag.NewFlagSet("top", flag.ExitOnError)
	f := addStatusFlags(fs)
	every := fs.Duration("interval", time.Second, "refresh interval")
	count := fs.Int("count", 0, "stop after this many refreshes (0: until interrupted)")
	fs.Parse(args)
	if *every <= 0 {
		return fmt.Errorf("--interval %s: want a positive duration", *every)
	}
	c, addr, name, err := f.dial()
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tick := time.NewTicker(*every)
	defer tick.Stop()
	var prev *host.EngineStatus
	var prevAt time.Time
	for n := 0; *count == 0 || n < *count; n++ {
		st, raw, err := fetchStatus(c, addr)
		if err != nil {
			return err
		}
		now := time.Now()
		if *f.asJSON {
			fmt.Println(string(raw))
		} else {
			fmt.Print("\x1b[H\x1b[2J") // home, clear: one screen, redrawn
			fmt.Printf("ferry top %s, every %s, %s\n\n", name, *every, now.Format(time.TimeOnly))
			if err := printStatus(os.Stdout, st, prev, now.Sub(prevAt)); err != nil {
				return err
			}
		}
		prev, prevAt = &st, now
		if *count != 0 && n+1 == *count {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
	return nil
}

// printFlows writes what st says of admission (the qos queue and its
// tenants), receiver credit, notifications and the engine's descriptor:
// each part only where the engine has it.
func printFlows(w io.Writer, tw *tabwriter.Writer, st host.EngineStatus) {
	if q := st.QoS; q.On {
		fmt.Fprintf(w, "\nqos: %d held now, %d held since start, %d dropped while held, bandwidth %.3f Gb/s\n", q.Held, q.HeldTotal, q.Dropped, q.Bandwidth*8/1e9)
		if len(q.Tenants) > 0 {
			fmt.Fprintln(tw, "TENANT\tADMITTED\tREJECTED\tBYTES\tQUEUED")
			for _, t := range q.Tenants {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\n", t.Name, t.Admitted, t.Rejected, t.Bytes, t.Queued)
			}
			tw.Flush()
		}
	}
	if len(st.Credit) > 0 {
		fmt.Fprintln(w, "\nreceiver credit:")
		fmt.Fprintln(tw, "SEGMENT\tWINDOW\tREQUESTS\tIN USE\tIN FLIGHT\tGRANTS\tREFUSED\tWAITS\tRESETS")
		for _, c := range st.Credit {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", c.Segment, c.Window, c.Requests, c.InUse, c.InFlight, c.Grants, c.Refused, c.Waits, c.Resets)
		}
		tw.Flush()
	}
	if len(st.Devices) > 0 {
		fmt.Fprintln(w, "\ndevices:")
		fmt.Fprintln(tw, "PLUGIN\tSTATE\tKIND\tREGIONS\tDEVICES")
		for _, d := range st.Devices {
			kind := d.Kind
			if d.Simulated {
				kind += " (simulated)"
			}
			var devs []string
			for _, a := range d.Devices {
				devs = append(devs, fmt.Sprintf("%d:%s %s numa %d", a.Index, a.Name, selector.FormatSize(a.Memory), a.NUMANode))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", d.Name, d.State, kind, d.Regions, strings.Join(devs, "; "))
		}
		tw.Flush()
	}
	if s := st.Staging; s != nil {
		fmt.Fprintf(w, "staging: %d of %d slots of %s in use, %d waits for a slot\n", s.Used, s.Slots, selector.FormatSize(s.SlotSize), s.Waits)
	}
	n := st.Notifications
	fmt.Fprintf(w, "\nnotifications: %d sent, %d send failed, %d not sent; %d received, %d duplicates, %d refused, %d forged, %d invalid; %d status calls denied\n",
		n.Sent, n.SendFailed, n.NotSent, n.Received, n.Duplicates, n.Refused, n.Forged, n.Invalid, n.StatusDenied)
	if st.DescriptorsRefused != 0 || st.PublishRepairs != 0 {
		fmt.Fprintf(w, "descriptors: %d peer descriptors refused (unsigned or badly signed), %d times this engine's own written back\n", st.DescriptorsRefused, st.PublishRepairs)
	}
}

// servedByRail sums the bytes each rail served peers, keyed by transport
// and rail index, for the rails of plugins that count them.
func servedByRail(st host.EngineStatus) map[string]uint64 {
	out := map[string]uint64{}
	for _, p := range st.Plugins {
		if !p.ServedKnown {
			continue
		}
		for _, r := range st.Rails {
			if r.Transport == p.Name {
				out[fmt.Sprint(r.Transport, r.Index)] = 0 // counted, none yet
			}
		}
		for _, v := range p.Served {
			out[fmt.Sprint(p.Name, v.Rail)] += v.Bytes
		}
	}
	return out
}

// printServed writes the traffic the engine served its peers (it the
// target of their writes and reads), per peer, transport, rail and op;
// with prev, each row's throughput since then. It names the running
// plugins that do not count served traffic: theirs is unknown, not 0.
func printServed(w io.Writer, tw *tabwriter.Writer, st host.EngineStatus, prev *host.EngineStatus, dt time.Duration) {
	key := func(p string, v host.ServedStatus) string {
		return fmt.Sprint(p, "\x00", v.Peer, "\x00", v.Rail, "\x00", v.Op)
	}
	old := map[string]uint64{}
	if prev != nil {
		for _, p := range prev.Plugins {
			for _, v := range p.Served {
				old[key(p.Name, v)] = v.Bytes
			}
		}
	}
	railName := map[string]string{}
	for _, r := range st.Rails {
		railName[fmt.Sprint(r.Transport, r.Index)] = r.Name
	}
	var unknown []string
	rows, known := 0, 0
	for _, p := range st.Plugins {
		if !p.ServedKnown {
			if p.State == "running" {
				unknown = append(unknown, p.Name)
			}
			continue
		}
		known++
		for _, v := range p.Served {
			if rows == 0 {
				fmt.Fprintln(w, "\nserved to peers (this engine the target of their requests):")
				fmt.Fprintln(tw, "PEER\tTRANSPORT\tRAIL\tNAME\tOP\tREQUESTS\tBYTES\tNOW Gb/s")
			}
			rows++
			rate := "-"
			if b, ok := old[key(p.Name, v)]; ok && dt > 0 && v.Bytes >= b {
				rate = fmt.Sprintf("%.3f", float64(v.Bytes-b)*8/dt.Seconds()/1e9)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", v.Peer, p.Name, v.Rail, railName[fmt.Sprint(p.Name, v.Rail)], v.Op, v.Requests, v.Bytes, rate)
		}
	}
	tw.Flush()
	if rows == 0 && known > 0 {
		fmt.Fprintln(w, "\nserved to peers: nothing yet")
	}
	if len(unknown) > 0 {
		fmt.Fprintf(w, "served traffic not known for %s: the plugin does not count it (an older plugin?)\n", strings.Join(unknown, ", "))
	}
}

// printStatus writes one screen of st. With prev (the status dt before)
// the rails show their throughput since then.
func printStatus(w io.Writer, st host.EngineStatus, prev *host.EngineStatus, dt time.Duration) error {
	fmt.Fprintf(w, "engine %s  incarnation %d  control %s\nmetastore %s (%s)  admission %s\n",
		st.Name, st.Incarnation, st.Control, st.Metastore, st.MetastoreOK, st.Admission)
	for _, wl := range st.MetastoreWatches {
		fmt.Fprintf(w, "metastore watch %s\n", wl)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PLUGIN\tSTATE\tPID\tRESTARTS\tSTALLS\tFAULTY\tOUTSTANDING\tREASON")
	for _, p := range st.Plugins {
		why := p.Reason
		if why == "" && p.LastExit != "" {
			why = "last exit: " + p.LastExit
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Name, p.State, p.PID, p.Restarts, p.Stalls, p.Faulty, p.Outstanding, why)
	}
	tw.Flush()
	if len(st.Rails) > 0 {
		fmt.Fprintln(w)
		old := map[string]uint64{}
		if prev != nil {
			for _, r := range prev.Rails {
				old[fmt.Sprint(r.Transport, r.Index)] = r.Bytes
			}
		}
		served := servedByRail(st)
		fmt.Fprintln(tw, "TRANSPORT\tRAIL\tNAME\tBYTES\tNOW Gb/s\tEWMA Gb/s\tIN FLIGHT\tERRORS\tPAUSED\tSERVED")
		for _, r := range st.Rails {
			rate := "-"
			if b, ok := old[fmt.Sprint(r.Transport, r.Index)]; ok && dt > 0 && r.Bytes >= b {
				rate = fmt.Sprintf("%.3f", float64(r.Bytes-b)*8/dt.Seconds()/1e9)
			}
			paused := "no"
			if !r.PausedUntil.IsZero() && r.PausedUntil.After(time.Now()) {
				paused = "until " + r.PausedUntil.Format(time.TimeOnly)
			}
			sv := "-" // its plugin does not count served traffic
			if b, ok := served[fmt.Sprint(r.Transport, r.Index)]; ok {
				sv = fmt.Sprint(b)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%.3f\t%d\t%d\t%s\t%s\n", r.Transport, r.Index, r.Name, r.Bytes, rate, r.EWMAGbps, r.InFlight, r.Errors, paused, sv)
		}
		tw.Flush()
	}
	printServed(w, tw, st, prev, dt)
	fmt.Fprintf(w, "\n%d open segments\n", len(st.Segments))
	if len(st.Segments) > 0 {
		fmt.Fprintln(tw, "ID\tSEGMENT\tINCARNATION\tSAME MACHINE\tTRANSPORTS\tBUFFERS\tSTATE")
		for _, s := range st.Segments {
			state := "open"
			switch {
			case s.Retired != "":
				state = "retired: " + s.Retired
			case s.Gone != "":
				state = "gone from the metastore: " + s.Gone
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%v\t%s\t%d\t%s\n", s.ID, s.Name, s.Incarnation, s.SameMachine, strings.Join(s.Transports, ","), s.Buffers, state)
		}
		tw.Flush()
	}
	printFlows(w, tw, st)
	fmt.Fprintf(w, "\n%d failed attempts since start", st.FailuresSeen)
	if len(st.Failures) == 0 {
		fmt.Fprintln(w)
		return nil
	}
	fmt.Fprintf(w, "; the latest %d:\n", len(st.Failures))
	fmt.Fprintln(tw, "TIME\tSEGMENT\tOP\tBYTES\tTRANSPORT\tRAIL\tSTATUS\tRETRIED\tCAUSE")
	for _, f := range st.Failures {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%v\t%s\n", f.Time.Format(time.TimeOnly), f.Segment, f.Op, f.Length, f.Transport, f.Rail, f.Status, f.Retried, f.Cause)
	}
	return tw.Flush()
}
