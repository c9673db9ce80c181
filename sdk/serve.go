package sdk

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	plugin "github.com/hashicorp/go-plugin"

	"github.com/ferrydev/ferry/sdk/shm"
)

// pluginSlice is the scheduler slice a plugin process asks for its
// threads (ServeTransport): LatencySlice, the kernel's shortest. Under
// EEVDF a thread that wakes runs as soon as the running one has used the
// slice that one asked for; with a short slice of its own it also gets
// the earliest deadline. A plugin's lane that wakes, or comes back from
// a preemption, then gets its core within about 100 us, not after
// another process's slice; a batch whose plugin lost its core waited that
// long (the p99 of shm 4 KiB x128 beside one busy loop per core was 4-5
// ms, a slice of the busy loop, at p50 31 us).
//
// Measured with `ferry bench --size 4096 --duration 3s` on a two-vCPU VM,
// 3 interleaved rounds of each arm, a 20 ms slice against this one:
// beside one busy loop per core (taskset -c CPU sh -c 'while :; do :;
// done'), shm x128 2.24-3.22 -> 4.07-4.88 GB/s, shm x1 0.99-1.12 ->
// 1.15-1.17, tcp x128 0.139-0.158 -> 0.164-0.225 (p99 15.4-16.6 -> 7.4-8.0
// ms), tcp x1 0.017-0.030 -> 0.020-0.037; on the quiet machine shm x1,
// x128 and 64 KiB 0-4% faster, tcp x128 1.04 -> 1.07 GB/s (p99 2.1-2.5
// -> 1.3-1.4 ms), tcp 1 MiB unchanged, and tcp x1 a little slower (p50
// 12.1-12.8 -> 13.1-13.8 us). The 20 ms slice was chosen when a tcp 4 KiB
// write's latency against raw TCP was 1.92-2.24 with the kernel's
// default slice and 1.37 with it; the request path has changed since
// (Ferry's p50 is now a quarter of its raw-socket baseline's).
// A plugin's nice bulk threads keep BulkSlice (LowerThread).
const pluginSlice = LatencySlice

// ServeTransport serves impl as a Ferry transport plugin. A plugin's main
// calls it and nothing else. It serves every protocol version from
// MinProtocolVersion to ProtocolVersion; go-plugin picks the highest the
// host also speaks. It returns only after the host asked the
// plugin to stop or went away; a plugin whose host died exits.
func ServeTransport(impl Transport) {
	logger, fds := servePrelude()
	sets := make(map[int]plugin.PluginSet)
	var tps []*TransportPlugin
	for v := MinProtocolVersion; v <= ProtocolVersion; v++ {
		tp := &TransportPlugin{Impl: impl, FDs: fds, Protocol: v}
		tps = append(tps, tp)
		sets[v] = plugin.PluginSet{KindTransport: tp}
	}
	// go-plugin serves one of the sets; the one whose server runs stops
	// the lanes, else impl stops.
	serve(logger, fds, sets, func(ctx context.Context) {
		for _, tp := range tps {
			if tp.srv.Load() != nil {
				tp.Stop(ctx)
				return
			}
		}
		impl.Stop(ctx)
	})
}

// ServeDevice serves impl as a Ferry device plugin, as ServeTransport
// serves a transport: same fd socket (host memory arrives on it), same
// exit when the host goes away. It serves protocol versions
// DeviceProtocolVersion to ProtocolVersion.
func ServeDevice(impl Device) {
	logger, fds := servePrelude()
	sets := make(map[int]plugin.PluginSet)
	var dps []*DevicePlugin
	for v := DeviceProtocolVersion; v <= ProtocolVersion; v++ {
		dp := &DevicePlugin{Impl: impl, FDs: fds}
		dps = append(dps, dp)
		sets[v] = plugin.PluginSet{KindDevice: dp}
	}
	serve(logger, fds, sets, func(ctx context.Context) {
		for _, dp := range dps {
			if dp.srv.Load() != nil {
				dp.Stop(ctx)
				return
			}
		}
		impl.Stop(ctx)
	})
}

// servePrelude is what every plugin process does before it serves: a
// logger go-plugin re-logs under the plugin's name, the fd socket (or
// exit: without it no memory can be shared) and a longer scheduler slice.
func servePrelude() (hclog.Logger, *shm.FDReceiver) {
	logger := NewLogger("")
	fds, err := openFDSocket()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ferry plugin: %v\n", err)
		os.Exit(1)
	}
	if err := requestSlice(pluginSlice); err != nil {
		logger.Warn("could not ask the kernel for a short scheduler slice; small-request latency may suffer on a busy machine", "slice", pluginSlice, "error", err)
	}
	return logger, fds
}

// serve serves sets through go-plugin until the host stops the plugin.
// The host going away (EOF on the fd socket) runs stop and exits the
// process even if go-plugin's own connection lingers.
func serve(logger hclog.Logger, fds *shm.FDReceiver, sets map[int]plugin.PluginSet, stop func(context.Context)) {
	go func() {
		<-fds.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		stop(ctx)
		logger.Info("host closed the fd socket; exiting")
		os.Exit(0)
	}()
	// A plugin lives as long as its host says: the host stops it, or it
	// exits when the host goes away (above, and Pdeathsig). A terminal's
	// Ctrl-C and a service manager's SIGTERM reach the whole process group
	// at once; the plugin leaves them to the host, which stops its plugins
	// in order, rather than dying under work in flight.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig:  Handshake,
		VersionedPlugins: sets,
		GRPCServer:       plugin.DefaultGRPCServer,
		Logger:           logger,
	})
}

func openFDSocket() (*shm.FDReceiver, error) {
	v := os.Getenv(FDSocketEnv)
	if v == "" {
		return nil, fmt.Errorf("%s is not set: this binary is a Ferry plugin and is started by a Ferry engine (try `ferry plugins`)", FDSocketEnv)
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 3 {
		return nil, fmt.Errorf("%s=%q is not an inherited file descriptor number", FDSocketEnv, v)
	}
	f := os.NewFile(uintptr(n), "ferry-fd-socket")
	if f == nil {
		return nil, fmt.Errorf("%s=%d: no such file descriptor", FDSocketEnv, n)
	}
	return shm.NewFDReceiver(f)
}
