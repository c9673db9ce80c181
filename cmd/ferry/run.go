package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk/kit"
)

// readyLine is what `ferry run` prints on stdout once its memory is
// registered, so that a parent process (bench, demo, tests) can use it.
type readyLine struct {
	Name        string       `json:"name"`
	Incarnation uint64       `json:"incarnation"`
	Metastore   string       `json:"metastore"`
	Control     string       `json:"control"`           // host:port of the control service; peers open it in peer-to-peer mode
	Metrics     string       `json:"metrics,omitempty"` // host:port of /metrics, when a metrics block serves one
	Buffers     []readyBuf   `json:"buffers"`
	Plugins     []pluginLine `json:"plugins"`
}

type readyBuf struct {
	Base   uint64 `json:"base"`
	Length int    `json:"length"`
	Perm   string `json:"perm"`
}

// pluginLine is one plugin as a running engine sees it: in the ready line
// and in the answer to the `plugins` control line.
type pluginLine struct {
	Name        string `json:"name"`
	State       string `json:"state"`
	Reason      string `json:"reason,omitempty"`
	PID         int    `json:"pid,omitempty"`
	Restarts    uint64 `json:"restarts"`
	Stalls      uint64 `json:"stalls"`
	Outstanding int64  `json:"outstanding"`
	LastExit    string `json:"last_exit,omitempty"`
}

func pluginLines(ctx context.Context, e *host.Engine) []pluginLine {
	var out []pluginLine
	for _, p := range e.Status(ctx).Plugins {
		out = append(out, pluginLine{Name: p.Name, State: p.State, Reason: p.Reason, PID: p.PID,
			Restarts: p.Restarts, Stalls: p.Stalls, Outstanding: p.Outstanding, LastExit: p.LastExit})
	}
	return out
}

// Pattern fills b with the bytes that offset off of a pattern segment
// holds, so that a reader can check any range without the writer.
func Pattern(b []byte, off uint64, seed uint64) {
	for i := range b {
		x := off + uint64(i) + seed*0x9e3779b97f4a7c15
		x ^= x >> 29
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 32
		b[i] = byte(x)
	}
}

// loadConfig reads --config or builds the default config for name; a
// metastoreURL (--metastore, any form config.ParseMetastoreURL takes)
// replaces the config's metastore block.
func loadConfig(path, name, metastoreURL string) (*config.Config, error) {
	var cfg *config.Config
	if path != "" {
		c, err := config.Load(path)
		if err != nil {
			return nil, err
		}
		cfg = c
	} else {
		cfg = config.Default(name)
	}
	if name != "" {
		cfg.Name = name
	}
	if metastoreURL != "" {
		m, err := config.ParseMetastoreURL(metastoreURL)
		if err != nil {
			return nil, fmt.Errorf("--metastore: %w", err)
		}
		cfg.SetMetastore(m)
		if path == "" && cfg.ClusterSecretFile == "" {
			// The built-in config joining a cluster through its
			// metastore: a secret this process generated is one no
			// member knows, and would have it refuse them all. Without
			// $FERRY_CLUSTER_SECRET_FILE it joins with none (and warns).
			cfg.ClusterSecret = nil
		}
	}
	return cfg, nil
}

// newEngine starts an engine on the config loadConfig makes of path, name
// and metastoreURL, logging as lf says.
func newEngine(ctx context.Context, path, name, metastoreURL string, lf logFlags) (*host.Engine, error) {
	return newEngineFree(ctx, path, name, metastoreURL, lf, false)
}

// newEngineFree is newEngine; with freePorts the engine serves its
// control service and /metrics on ports it picks, at the file's
// addresses, so that it can run beside another engine of the same file.
func newEngineFree(ctx context.Context, path, name, metastoreURL string, lf logFlags, freePorts bool) (*host.Engine, error) {
	log, err := lf.logger()
	if err != nil {
		return nil, err
	}
	cfg, err := loadConfig(path, name, metastoreURL)
	if err != nil {
		return nil, err
	}
	if freePorts {
		cfg.Control.Listen, cfg.Metrics.Listen = anyPort(cfg.Control.Listen), anyPort(cfg.Metrics.Listen)
	}
	return host.New(ctx, cfg, host.WithLogger(log))
}

// anyPort is host:port listen at port 0, or "" for "": the same address
// on a port the kernel picks.
func anyPort(listen string) string {
	host, _, err := net.SplitHostPort(listen)
	if listen == "" || err != nil {
		return listen // config validation names what is wrong with it
	}
	return net.JoinHostPort(host, "0")
}

// engineFlags are the flags of the commands that serve an engine until
// stopped: its config, its name, the metastore and the log level.
type engineFlags struct {
	config, name, metastore *string
	log                     logFlags
	// freePorts is `ferry run --free-ports` (see newEngineFree); nil for
	// the other commands.
	freePorts *bool
}

// addEngineFlags defines the engine flags on fs; nameHelp says what
// --name defaults to.
func addEngineFlags(fs *flag.FlagSet, configHelp, nameHelp string) engineFlags {
	return engineFlags{
		config:    fs.String("config", "", configHelp),
		name:      fs.String("name", "", nameHelp),
		metastore: fs.String("metastore", "", "use this metastore instead of the config's: "+config.MetastoreURLForms),
		log:       addLogFlags(fs),
	}
}

// start starts the engine the flags describe under a context that SIGINT
// and SIGTERM cancel; done closes the engine and lets the signals go.
func (f engineFlags) start() (ctx context.Context, e *host.Engine, done func(), err error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	e, err = newEngineFree(ctx, *f.config, *f.name, *f.metastore, f.log, f.freePorts != nil && *f.freePorts)
	if err != nil {
		stop()
		return nil, nil, nil, err
	}
	return ctx, e, func() { e.Close(); stop() }, nil
}

// parseOp reads an --op flag.
func parseOp(s string) (host.Op, error) {
	switch s {
	case "read":
		return host.Read, nil
	case "write":
		return host.Write, nil
	}
	return 0, fmt.Errorf("--op %q: want read or write", s)
}

func cmdRun(args []string) error {
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	engine := addEngineFlags(fs, "HCL config file (default: built-in single-node config)", "engine name (overrides the config)")
	expose := fs.String("expose", "0", "allocate and register this much memory read-write for peers (e.g. 64MiB)")
	exposeRO := fs.String("expose-ro", "0", "also allocate and register this much memory read-only for peers")
	seed := fs.Uint64("pattern", 0, "fill exposed memory with the pattern of this seed (0 = zeroes)")
	appMem := fs.Bool("app-memory", false, "expose Go heap memory (allocated by the application, not by Engine.Allocate): peers reach it through tcp, with one extra copy")
	control := fs.Bool("control-stdin", false, "answer the control lines \"sha256 <offset> <length>\", \"fill <seed>\", \"plugins\" and \"upgrade <plugin> <path> [sha256]\" on stdin; exit at EOF (docs/control-stdin.md)")
	engine.freePorts = fs.Bool("free-ports", false, "serve the control service and /metrics at --config's addresses but on ports the engine picks: for an engine beside another of the same config (bench's target)")
	fs.Parse(args)

	ctx, e, closeEngine, err := engine.start()
	if err != nil {
		return err
	}
	defer closeEngine()
	ready := readyLine{Name: e.Name(), Incarnation: e.Incarnation(), Metastore: e.MetastoreURL(), Control: e.ControlAddr(), Metrics: e.MetricsAddr()}
	ready.Plugins = pluginLines(ctx, e)
	var rw []byte
	for _, x := range []struct {
		size string
		perm host.Perm
	}{{*expose, host.RemoteReadWrite}, {*exposeRO, host.RemoteRead}} {
		n, err := config.ParseSize(x.size)
		if err != nil {
			return err
		}
		if n == 0 {
			continue
		}
		buf := make([]byte, n) // with --app-memory; Register pins it
		if !*appMem {
			if buf, err = e.Allocate(int(n)); err != nil {
				return err
			}
		}
		if *seed != 0 {
			Pattern(buf, 0, *seed)
		}
		base, err := e.Register(ctx, buf, x.perm)
		if err != nil {
			return err
		}
		if x.perm == host.RemoteReadWrite {
			rw = buf
		}
		ready.Buffers = append(ready.Buffers, readyBuf{Base: base, Length: len(buf), Perm: x.perm.String()})
	}
	if *engine.config != "" {
		// SIGHUP: the config file's plugin blocks again, each plugin
		// whose binary changed upgraded live (reload.go).
		defer reloadOnHUP(ctx, e, *engine.config)()
	}
	line, _ := json.Marshal(ready)
	fmt.Println(string(line))
	if !*control {
		<-ctx.Done()
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "plugins" {
				line, _ := json.Marshal(pluginLines(ctx, e))
				fmt.Println(string(line))
				continue
			}
			if f := strings.Fields(sc.Text()); len(f) >= 3 && len(f) <= 4 && f[0] == "upgrade" {
				fmt.Println(upgradeLine(ctx, e, f[1:]))
				continue
			}
			fmt.Println(controlLine(sc.Text(), rw))
		}
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
	return nil
}

// controlLine answers one line of the stdin control protocol.
func controlLine(line string, buf []byte) string {
	f := strings.Fields(line)
	switch {
	case len(f) == 3 && f[0] == "sha256":
		off, err1 := strconv.ParseUint(f[1], 10, 64)
		n, err2 := strconv.ParseUint(f[2], 10, 64)
		if err1 != nil || err2 != nil || off+n > uint64(len(buf)) || off+n < off {
			return "error: bad range"
		}
		sum := sha256.Sum256(buf[off : off+n])
		return hex.EncodeToString(sum[:])
	case len(f) == 2 && f[0] == "fill":
		seed, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return "error: bad seed"
		}
		Pattern(buf, 0, seed)
		return "ok"
	}
	return "error: unknown command (want `sha256 <offset> <length>`, `fill <seed>`, `plugins` or `upgrade <plugin> <path> [sha256]`)"
}

// upgradeLine answers `upgrade <plugin> <path> [sha256]` on the stdin
// control protocol: the plugin upgraded live (Engine.UpgradePlugin).
func upgradeLine(ctx context.Context, e *host.Engine, f []string) string {
	u := host.PluginUpgrade{Name: f[0], Path: f[1]}
	if len(f) == 3 {
		u.SHA256 = f[2]
	}
	if err := e.UpgradePlugin(ctx, u); err != nil {
		return "error: " + err.Error()
	}
	return "ok"
}

func cmdMetad(args []string) error {
	fs := flag.NewFlagSet("metad", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:7070", "address to serve on")
	secretFile := fs.String("cluster-secret-file", "", "the engines' cluster secret: their signed descriptors then get the headroom no other writer can use")
	unleased := fs.Duration("unleased-ttl", metastore.DefaultUnleasedTTL, "how long an entry written without a lease (and not signed) lives")
	fs.Parse(args)
	opts := metastore.ServerOptions{UnleasedTTL: *unleased}
	if *secretFile != "" {
		secret, err := kit.ReadSecretFile(*secretFile, "make the file readable by ferry metad, or drop --cluster-secret-file")
		if err != nil {
			return fmt.Errorf("ferry metad: --cluster-secret-file: %w", err)
		}
		signer, err := segment.NewSigner(secret)
		if err != nil {
			return fmt.Errorf("ferry metad: --cluster-secret-file %s: %w", *secretFile, err)
		}
		opts.Verify = signer.Verify
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv, err := metastore.ListenWith(ctx, *listen, opts)
	if err != nil {
		return err
	}
	fmt.Printf("ferry metad: serving %s\n", srv.URL())
	<-ctx.Done()
	return srv.Close()
}
