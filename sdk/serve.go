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
// threads (ServeTransport).
//
// Measured on a two-vCPU VM with `ferry bench --transport tcp --op write
// --size 4KiB`, where the host's waiter spins on one CPU while the two TCP
// plugins take turns on the other: with the kernel's default slice the
// latency ratio against raw TCP was 1.92 and 2.24 (medians of 6 and 7
// runs, up to 2.90), with 20 ms 1.37 and 1.37 (every run at most 1.64).
// Why, exactly, is not established; a longer slice gives a plugin thread a
// later virtual deadline under EEVDF, so a plugin thread that wakes does
// not preempt a spinning waiter whose next step it is waiting for, and
// one that runs finishes its burst.
const pluginSlice = 20 * time.Millisecond

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
		logger.Warn("could not ask the kernel for a longer scheduler slice; small-request latency may suffer", "slice", pluginSlice, "error", err)
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
