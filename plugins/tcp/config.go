package tcp

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/kit"
)

// The plugin's `config { ... }` block (Settings declares it):
//
//	config {
//	  listen               = ["127.0.0.1:0"]   # rail i = address i: accepts there, dials from its IP
//	  advertise            = []                # addresses peers dial; default: the bound listen addresses
//	  connections_per_peer = 2                 # per peer and rail, 1..64
//	  max_frame            = "64MiB"           # largest payload per frame, 4KiB..1GiB
//	  io_timeout           = "30s"             # longest wait without progress on a busy connection
//
//	  cluster_secret       = "..."             # at least 16 bytes; every engine of the cluster the same
//	  cluster_secret_file  = "/etc/ferry/secret"  # or: read at Start, trailing newline trimmed;
//	                                           # relative to the directory of the config file
//	  max_startups             = "64:30:256"   # unauthenticated connections: start:rate:full
//	  max_connections_per_host = 64            # unauthenticated connections per remote IP address
//	  max_connections          = 4096          # authenticated connections in all
//	  max_connections_per_peer = 256           # authenticated connections per peer engine
//	  handshake_timeout        = "5s"          # hello, authentication and the first request
//	                                           # must be done by then
//	  max_held_responses       = 64            # responses a connection holds back to send together, 1..64
//	  max_receive_buffer       = "256MiB"      # staging buffers of every connection together (bounds.go),
//	                                           # and again their read-ahead buffers (ahead.go)
//	  priority_connection      = true          # high-priority descriptors get a connection of their own (prio.go)
//	  bulk_nice                = 0             # niceness of the bulk connections' threads, 0..19; 0: off (prio.go)
//	  bulk_chunk               = 0             # most payload bytes per system call on a bulk connection,
//	                                           # 16KiB..1GiB; 0: no bound (prio.go)
//	  short_slices             = false         # no effect: every plugin thread has a short scheduler slice (sdk.ServeTransport)
//	  priority_thread          = true          # priority connections' readers wait on threads of their own (prio.go)
//	  bulk_buffer              = 0             # kernel send and receive buffer of a bulk connection, 16KiB..1GiB;
//	                                           # 0: the kernel's own sizing (prio.go)
//	}
//
// Every attribute is optional. cluster_secret and cluster_secret_file are
// mutually exclusive; with either, every connection is mutually
// authenticated (see the package documentation).
//
// Admission. A connection is unauthenticated from its accept until its
// proof verifies (with a cluster secret) or its first request header has
// arrived (without one), which must happen within handshake_timeout. The
// unauthenticated ones have their own budget, max_startups, read as
// OpenSSH reads its MaxStartups: below start nothing is shed; from start
// on, each new connection sheds an unauthenticated one with a probability
// that rises linearly from rate percent to 100 percent at full; at full
// one is always shed. "N" alone is "N:100:N". Unlike OpenSSH, what is
// shed is the oldest unauthenticated connection, not the new one: a peer
// finishes its handshake within a round trip, so a flood that keeps the
// budget full only ever sheds its own idle or dribbling connections and
// never locks a real peer out. max_connections_per_host caps one remote
// IP address's unauthenticated connections the same way (its own oldest is
// shed), so that a flood from one host sheds nothing of the others'.
// Authenticated connections count against max_connections, and against
// max_connections_per_peer for the engine the dialer names in its hello
// (with a cluster secret, a name its proof authenticates; without one, a
// name it claims) or, for a dialer that names none, its IP address; one
// over either is closed at once.
//
// Rails. Each listen address is one local rail, numbered in list order; a
// descriptor's Rail picks one. A rail dials each peer from its listen IP
// (unless that is a wildcard such as 0.0.0.0 or ::) towards the peer's
// advertised address with the longest common prefix, so that its traffic
// leaves through that address's interface. With advertise set, peers dial
// the advertised addresses; the rails stay the listen addresses.
// Defaults and limits of the configuration.
const (
	DefaultMaxFrame  = 64 << 20
	DefaultIOTimeout = 30 * time.Second
	DefaultConns     = 2
	MaxConns         = 64
	minMaxFrame      = 4 << 10
	maxMaxFrame      = 1 << 30

	DefaultMaxConnections        = 4096
	DefaultMaxConnectionsPerHost = 64
	DefaultMaxConnectionsPerPeer = 256
	DefaultMaxStartups           = "64:30:256"
	DefaultHandshakeTimeout      = 5 * time.Second
	MinSecretLen                 = kit.MinSecretLen
	maxMaxConnections            = 1 << 20
	minBulkChunk                 = 16 << 10
	maxBulkChunk                 = 1 << 30
)

// settings is the validated configuration.
type settings struct {
	listen    []string
	advertise []string
	conns     int
	maxFrame  uint64
	ioTimeout time.Duration

	kit.SecretSettings          // the cluster secret; nil: connections are not authenticated
	maxConns           int      // authenticated connections in all
	maxConnsPerHost    int      // unauthenticated connections per remote IP address
	maxConnsPerPeer    int      // authenticated connections per peer (peerKey)
	startupsText       string   // max_startups as written
	startups           startups // the unauthenticated connections' budget
	handshakeTimeout   time.Duration
	maxHeld            int    // responses a connection holds back, 1..maxPending
	maxRecvBuffer      uint64 // staging bytes of every server connection together
	prioConn           bool   // a connection per peer and rail for high-priority descriptors (prio.go)
	bulkNice           int    // niceness of the bulk connections' goroutines' threads (prio.go); 0: off
	bulkChunk          int    // payload bytes a bulk connection moves per system call (prio.go); 0: no bound
	shortSlices        bool   // accepted for older configs; no effect (every plugin thread has a short slice: sdk.ServeTransport)
	prioThread         bool   // priority connections' readers wait on threads of their own (prio.go)
	bulkBuffer         int    // SO_SNDBUF and SO_RCVBUF of a bulk connection (prio.go); 0: the kernel's
}

// Settings declares the plugin's config block: defaults, ranges and the
// reference (docs/config.md).
var Settings = &conf.Table[settings]{
	Name: "tcp",
	Doc:  "The tcp plugin (`plugin \"tcp\" { config { ... } }`): any two engines over TCP, every connection mutually authenticated with a cluster secret. Each listen address is one rail.",
	Fields: append([]conf.Field[settings]{
		{Name: "listen", Type: conf.Strings, Default: []string{"127.0.0.1:0"}, Example: `["10.0.0.1:7100"]`,
			Doc:   "host:port addresses to accept on, one rail each in list order; a rail dials from its address's IP. Port 0 picks a free one.",
			At:    func(s *settings) any { return &s.listen },
			Check: func(s *settings) error { return checkAddrs(s.listen, true) }},
		{Name: "advertise", Type: conf.Strings, DefaultDoc: "the bound listen addresses", Example: `["10.0.0.1:7100"]`,
			Doc:   "The addresses peers dial, when they are not the listen addresses (NAT, a wildcard listen address).",
			At:    func(s *settings) any { return &s.advertise },
			Check: func(s *settings) error { return checkAddrs(s.advertise, false) }},
		{Name: "connections_per_peer", Type: conf.Int, Default: DefaultConns, Min: 1, Max: MaxConns,
			Doc: "Connections per peer and rail. The first takes every frame while less than 4 MiB is queued or in flight on it, so small requests share one connection; past that, frames go to the least loaded.",
			At:  func(s *settings) any { return &s.conns }},
		{Name: "max_frame", Type: conf.Size, Default: uint64(DefaultMaxFrame), Min: int64(minMaxFrame), Max: int64(maxMaxFrame),
			Doc: "The largest payload of one frame.",
			At:  func(s *settings) any { return &s.maxFrame }},
		{Name: "io_timeout", Type: conf.Duration, Default: DefaultIOTimeout, Min: time.Millisecond, Max: time.Hour,
			Doc: "The longest wait without progress on a busy connection.",
			At:  func(s *settings) any { return &s.ioTimeout }},
	}, append(kit.SecretFields(func(s *settings) *kit.SecretSettings { return &s.SecretSettings }),
		conf.Field[settings]{Name: "max_startups", Type: conf.String, Default: DefaultMaxStartups,
			Doc:   `Unauthenticated connections, "start:rate:full" as OpenSSH's MaxStartups: from start on, each new one sheds the oldest unauthenticated one with a probability rising from rate percent to 100 at full. "N" is "N:100:N".`,
			At:    func(s *settings) any { return &s.startupsText },
			Check: func(s *settings) (err error) { s.startups, err = parseStartups(s.startupsText); return err }},
		conf.Field[settings]{Name: "max_connections_per_host", Type: conf.Int, Default: DefaultMaxConnectionsPerHost, Min: 1, Max: maxMaxConnections,
			Doc: "Unauthenticated connections per remote IP address; a new one sheds that address's oldest.",
			At:  func(s *settings) any { return &s.maxConnsPerHost }},
		conf.Field[settings]{Name: "max_connections", Type: conf.Int, Default: DefaultMaxConnections, Min: 1, Max: maxMaxConnections,
			Doc: "Authenticated connections in all; one over is closed at once.",
			At:  func(s *settings) any { return &s.maxConns }},
		conf.Field[settings]{Name: "max_connections_per_peer", Type: conf.Int, Default: DefaultMaxConnectionsPerPeer, Min: 1, Max: maxMaxConnections,
			Doc: "Authenticated connections per peer engine (the name its hello gives, else its IP address).",
			At:  func(s *settings) any { return &s.maxConnsPerPeer }},
		conf.Field[settings]{Name: "handshake_timeout", Type: conf.Duration, Default: DefaultHandshakeTimeout, Min: time.Millisecond, Max: time.Hour,
			Doc: "By when a connection's hello, authentication and first request must be done.",
			At:  func(s *settings) any { return &s.handshakeTimeout }},
		conf.Field[settings]{Name: "max_held_responses", Type: conf.Int, Default: maxPending, Min: 1, Max: maxPending,
			Doc: "Responses a connection holds back to send together.",
			At:  func(s *settings) any { return &s.maxHeld }},
		conf.Field[settings]{Name: "max_receive_buffer", Type: conf.Size, Default: uint64(DefaultMaxReceiveBuffer), Min: int64(minMaxReceiveBuffer), Max: int64(maxMaxReceiveBuffer),
			Hint: "; below 64KiB a connection would wait for every staging buffer",
			Doc:  "Staging buffers of every connection together (bounds.go); a connection past it waits. Also bounds, separately, the 64KiB read-ahead buffers of busy connections (ahead.go); past it a connection reads without one.",
			At:   func(s *settings) any { return &s.maxRecvBuffer }},
		conf.Field[settings]{Name: "priority_connection", Type: conf.Bool, Default: true,
			Doc: "High-priority descriptors get a connection of their own (prio.go).",
			At:  func(s *settings) any { return &s.prioConn }},
		conf.Field[settings]{Name: "bulk_nice", Type: conf.Int, Default: 0, Min: 0, Max: sdk.MaxNice, Hint: " (0: off)",
			Doc: "Niceness of the bulk connections' threads; 0: off (prio.go).",
			At:  func(s *settings) any { return &s.bulkNice }},
		conf.Field[settings]{Name: "bulk_chunk", Type: conf.Size, Default: 0, Min: int64(minBulkChunk), Max: int64(maxBulkChunk), Hint: " (0: no bound)",
			Skip: func(s *settings) bool { return s.bulkChunk == 0 },
			Doc:  "Most payload bytes per system call on a bulk connection; 0: no bound (prio.go).",
			At:   func(s *settings) any { return &s.bulkChunk }},
		conf.Field[settings]{Name: "short_slices", Type: conf.Bool, Default: false,
			Doc: "No effect, accepted for older configs: every plugin thread now has a short scheduler slice (sdk.ServeTransport), which this asked for.",
			At:  func(s *settings) any { return &s.shortSlices }},
		conf.Field[settings]{Name: "priority_thread", Type: conf.Bool, Default: true,
			Doc: "Priority connections' readers wait on threads of their own (prio.go).",
			At:  func(s *settings) any { return &s.prioThread }},
		conf.Field[settings]{Name: "bulk_buffer", Type: conf.Size, Default: 0, Min: int64(minBulkChunk), Max: int64(maxBulkChunk), Hint: " (0: the kernel's sizing)",
			Skip: func(s *settings) bool { return s.bulkBuffer == 0 },
			Doc:  "Kernel send and receive buffer of a bulk connection; 0: the kernel's own sizing (prio.go).",
			At:   func(s *settings) any { return &s.bulkBuffer }},
	)...),
}

// defaultSettings are the settings of an empty block.
func defaultSettings() settings {
	s := settings{startups: startups{start: 64, rate: 30, full: 256}}
	Settings.Defaults(&s)
	return s
}

// parse decodes and checks the plugin's block by Settings. An error names
// the attribute and where its value sits in the operator's file (or,
// failing that, where the block starts).
func parse(cfg sdk.StartConfig) (settings, error) {
	s := defaultSettings()
	s.Secret = kit.EngineSecret(cfg) // unless the block names its own
	if err := conf.Decode(cfg, "tcp config", Settings, &s, func(_ *settings, b conf.Block) { kit.SecretRule(b) }); err != nil {
		return settings{}, err
	}
	return s, nil
}

// parseStartups reads max_startups: "start:rate:full" or "full".
func parseStartups(v string) (startups, error) {
	bad := func(why string) (startups, error) {
		return startups{}, fmt.Errorf("%q %s; write \"start:rate:full\" (for example %q: from 64 unauthenticated connections on, shed the oldest with a probability rising from 30%% to 100%% at 256) or one number", v, why, DefaultMaxStartups)
	}
	parts := strings.Split(v, ":")
	if len(parts) != 1 && len(parts) != 3 {
		return bad("is not start:rate:full")
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil || x < 0 {
			return bad(fmt.Sprintf("has %q, not a number", p))
		}
		n[i] = x
	}
	if len(parts) == 1 {
		n = [3]int{n[0], 100, n[0]}
	}
	s := startups{start: n[0], rate: n[1], full: n[2]}
	switch {
	case s.start < 1 || s.full > maxMaxConnections:
		return bad(fmt.Sprintf("is outside 1..%d", maxMaxConnections))
	case s.rate > 100:
		return bad("has a rate over 100 (percent)")
	case s.start > s.full:
		return bad("has start over full")
	}
	return s, nil
}

// checkAddrs checks a list of host:port addresses; need: at least one.
func checkAddrs(addrs []string, need bool) error {
	if need && len(addrs) == 0 {
		return fmt.Errorf("needs at least one address")
	}
	seen := make(map[string]bool, len(addrs))
	for _, a := range addrs {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			return err
		}
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return fmt.Errorf("address %q: bad port", a)
		}
		if seen[a] && port != "0" {
			return fmt.Errorf("address %q listed twice", a)
		}
		seen[a] = true
	}
	return nil
}

// CheckConfig decodes and checks cfg as Start does, starting nothing
// (sdk.ConfigChecker: `ferry plugins --config`).
func (t *Transport) CheckConfig(_ context.Context, cfg sdk.StartConfig) error {
	_, err := parse(cfg)
	return err
}
