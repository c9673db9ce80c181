package tcp

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/kit"
)

// Config is the plugin's `config { ... }` block:
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
//	  max_receive_buffer       = "256MiB"      # staging buffers of every connection together (bounds.go)
//	  priority_connection      = true          # high-priority descriptors get a connection of their own (prio.go)
//	  bulk_nice                = 0             # niceness of the bulk connections' threads, 0..19; 0: off (prio.go)
//	  bulk_chunk               = 0             # most payload bytes per system call on a bulk connection,
//	                                           # 16KiB..1GiB; 0: no bound (prio.go)
//	  short_slices             = false         # with bulk_nice: short scheduler slices for the other threads (prio.go)
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
type Config struct {
	Listen                []string `hcl:"listen,optional"`
	Advertise             []string `hcl:"advertise,optional"`
	ConnectionsPerPeer    *int     `hcl:"connections_per_peer,optional"`
	MaxFrame              *string  `hcl:"max_frame,optional"`
	IOTimeout             *string  `hcl:"io_timeout,optional"`
	ClusterSecret         *string  `hcl:"cluster_secret,optional"`
	ClusterSecretFile     *string  `hcl:"cluster_secret_file,optional"`
	MaxConnections        *int     `hcl:"max_connections,optional"`
	MaxConnectionsPerHost *int     `hcl:"max_connections_per_host,optional"`
	MaxConnectionsPerPeer *int     `hcl:"max_connections_per_peer,optional"`
	MaxStartups           *string  `hcl:"max_startups,optional"`
	HandshakeTimeout      *string  `hcl:"handshake_timeout,optional"`
	MaxHeldResponses      *int     `hcl:"max_held_responses,optional"`
	MaxReceiveBuffer      *string  `hcl:"max_receive_buffer,optional"`
	PriorityConnection    *bool    `hcl:"priority_connection,optional"`
	BulkNice              *int     `hcl:"bulk_nice,optional"`
	BulkChunk             *string  `hcl:"bulk_chunk,optional"`
	ShortSlices           *bool    `hcl:"short_slices,optional"`
	PriorityThread        *bool    `hcl:"priority_thread,optional"`
	BulkBuffer            *string  `hcl:"bulk_buffer,optional"`

	// Where each value sits in the operator's file, for diagnostics.
	ListenRange                hcl.Range `hcl:"listen,attr_value_range"`
	AdvertiseRange             hcl.Range `hcl:"advertise,attr_value_range"`
	ConnectionsPerPeerRange    hcl.Range `hcl:"connections_per_peer,attr_value_range"`
	MaxFrameRange              hcl.Range `hcl:"max_frame,attr_value_range"`
	IOTimeoutRange             hcl.Range `hcl:"io_timeout,attr_value_range"`
	ClusterSecretRange         hcl.Range `hcl:"cluster_secret,attr_value_range"`
	ClusterSecretFileRange     hcl.Range `hcl:"cluster_secret_file,attr_value_range"`
	MaxConnectionsRange        hcl.Range `hcl:"max_connections,attr_value_range"`
	MaxConnectionsPerHostRange hcl.Range `hcl:"max_connections_per_host,attr_value_range"`
	MaxConnectionsPerPeerRange hcl.Range `hcl:"max_connections_per_peer,attr_value_range"`
	MaxStartupsRange           hcl.Range `hcl:"max_startups,attr_value_range"`
	HandshakeTimeoutRange      hcl.Range `hcl:"handshake_timeout,attr_value_range"`
	BulkNiceRange              hcl.Range `hcl:"bulk_nice,attr_value_range"`
	BulkChunkRange             hcl.Range `hcl:"bulk_chunk,attr_value_range"`
	MaxHeldResponsesRange      hcl.Range `hcl:"max_held_responses,attr_value_range"`
	MaxReceiveBufferRange      hcl.Range `hcl:"max_receive_buffer,attr_value_range"`
	BulkBufferRange            hcl.Range `hcl:"bulk_buffer,attr_value_range"`
}

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

	secret           []byte   // the cluster secret; nil: connections are not authenticated
	maxConns         int      // authenticated connections in all
	maxConnsPerHost  int      // unauthenticated connections per remote IP address
	maxConnsPerPeer  int      // authenticated connections per peer (peerKey)
	startups         startups // the unauthenticated connections' budget
	handshakeTimeout time.Duration
	maxHeld          int    // responses a connection holds back, 1..maxPending
	maxRecvBuffer    uint64 // staging bytes of every server connection together
	prioConn         bool   // a connection per peer and rail for high-priority descriptors (prio.go)
	bulkNice         int    // niceness of the bulk connections' goroutines' threads (prio.go); 0: off
	bulkChunk        int    // payload bytes a bulk connection moves per system call (prio.go); 0: no bound
	shortSlices      bool   // with bulk_nice: short scheduler slices for the plugin's other threads (prio.go)
	prioThread       bool   // priority connections' readers wait on threads of their own (prio.go)
	bulkBuffer       int    // SO_SNDBUF and SO_RCVBUF of a bulk connection (prio.go); 0: the kernel's
}

func defaultSettings() settings {
	return settings{
		listen:           []string{"127.0.0.1:0"},
		conns:            DefaultConns,
		maxFrame:         DefaultMaxFrame,
		ioTimeout:        DefaultIOTimeout,
		maxConns:         DefaultMaxConnections,
		maxConnsPerHost:  DefaultMaxConnectionsPerHost,
		maxConnsPerPeer:  DefaultMaxConnectionsPerPeer,
		startups:         startups{start: 64, rate: 30, full: 256},
		handshakeTimeout: DefaultHandshakeTimeout,
		maxHeld:          maxPending,
		maxRecvBuffer:    DefaultMaxReceiveBuffer,
		prioConn:         true,
		prioThread:       true,
		bulkNice:         0, // off: the bulk connections carry normal priority, every request's default (docs/qos.md)
	}
}

// parseConfig decodes and validates the plugin's block. An error names
// the attribute and where its value sits in the operator's file (or,
// failing that, where the block starts).
func parseConfig(cfg sdk.StartConfig) (settings, error) {
	s := defaultSettings()
	s.secret = kit.EngineSecret(cfg) // unless the block names its own, below
	var c Config
	st := kit.Settings{Cfg: cfg, Prefix: "tcp config"}
	if ok, err := st.Decode(&c); !ok {
		return s, err
	}
	if c.Listen != nil {
		if len(c.Listen) == 0 {
			return settings{}, st.Errorf("listen", c.ListenRange, "needs at least one address")
		}
		if err := checkAddrs(c.Listen); err != nil {
			return settings{}, st.Errorf("listen", c.ListenRange, "%w", err)
		}
		s.listen = c.Listen
	}
	if len(c.Advertise) > 0 {
		if err := checkAddrs(c.Advertise); err != nil {
			return settings{}, st.Errorf("advertise", c.AdvertiseRange, "%w", err)
		}
		s.advertise = c.Advertise
	}
	if err := st.Int("connections_per_peer", c.ConnectionsPerPeer, c.ConnectionsPerPeerRange, 1, MaxConns, &s.conns); err != nil {
		return settings{}, err
	}
	if err := st.Size("max_frame", c.MaxFrame, c.MaxFrameRange, 1<<63, &s.maxFrame); err != nil {
		return settings{}, err
	}
	if c.MaxFrame != nil && (s.maxFrame < minMaxFrame || s.maxFrame > maxMaxFrame) {
		return settings{}, st.Errorf("max_frame", c.MaxFrameRange, "%q is outside 4KiB..1GiB", *c.MaxFrame)
	}
	if err := st.Duration("io_timeout", c.IOTimeout, c.IOTimeoutRange, time.Millisecond, time.Hour, &s.ioTimeout); err != nil {
		return settings{}, err
	}
	switch {
	case c.ClusterSecret != nil && c.ClusterSecretFile != nil:
		return settings{}, st.Errorf("cluster_secret", c.ClusterSecretRange,
			"cluster_secret and cluster_secret_file are both set; keep one (cluster_secret_file keeps the secret out of this file)")
	case c.ClusterSecret != nil:
		if n := len(*c.ClusterSecret); n < MinSecretLen {
			return settings{}, st.Errorf("cluster_secret", c.ClusterSecretRange,
				"%d bytes is too short; use at least %d random bytes (for example the output of `openssl rand -hex 32`), the same on every engine", n, MinSecretLen)
		}
		s.secret = []byte(*c.ClusterSecret)
	case c.ClusterSecretFile != nil:
		secret, err := readSecretFile(*c.ClusterSecretFile, cfg.ConfigFile)
		if err != nil {
			return settings{}, st.Errorf("cluster_secret_file", c.ClusterSecretFileRange, "%w", err)
		}
		s.secret = secret
	}
	if err := st.Int("max_connections", c.MaxConnections, c.MaxConnectionsRange, 1, maxMaxConnections, &s.maxConns); err != nil {
		return settings{}, err
	}
	if err := st.Int("max_connections_per_host", c.MaxConnectionsPerHost, c.MaxConnectionsPerHostRange, 1, maxMaxConnections, &s.maxConnsPerHost); err != nil {
		return settings{}, err
	}
	if err := st.Int("max_connections_per_peer", c.MaxConnectionsPerPeer, c.MaxConnectionsPerPeerRange, 1, maxMaxConnections, &s.maxConnsPerPeer); err != nil {
		return settings{}, err
	}
	if c.MaxStartups != nil {
		v, err := parseStartups(*c.MaxStartups)
		if err != nil {
			return settings{}, st.Errorf("max_startups", c.MaxStartupsRange, "%w", err)
		}
		s.startups = v
	}
	if err := st.Duration("handshake_timeout", c.HandshakeTimeout, c.HandshakeTimeoutRange, time.Millisecond, time.Hour, &s.handshakeTimeout); err != nil {
		return settings{}, err
	}
	if err := parseBounds(st, &c, &s); err != nil {
		return settings{}, err
	}
	if c.PriorityConnection != nil {
		s.prioConn = *c.PriorityConnection
	}
	if err := st.Int("bulk_nice", c.BulkNice, c.BulkNiceRange, 0, sdk.MaxNice, &s.bulkNice); err != nil {
		return settings{}, err
	}
	var chunk uint64
	if err := st.Size("bulk_chunk", c.BulkChunk, c.BulkChunkRange, maxBulkChunk, &chunk); err != nil {
		return settings{}, err
	}
	if c.BulkChunk != nil && chunk != 0 && chunk < minBulkChunk {
		return settings{}, st.Errorf("bulk_chunk", c.BulkChunkRange, "%q is below 16KiB; use 0 (no bound) or 16KiB..1GiB", *c.BulkChunk)
	}
	s.bulkChunk = int(chunk)
	if c.ShortSlices != nil {
		s.shortSlices = *c.ShortSlices
	}
	if c.PriorityThread != nil {
		s.prioThread = *c.PriorityThread
	}
	var buf uint64
	if err := st.Size("bulk_buffer", c.BulkBuffer, c.BulkBufferRange, maxBulkChunk, &buf); err != nil {
		return settings{}, err
	}
	if c.BulkBuffer != nil && buf != 0 && buf < minBulkChunk {
		return settings{}, st.Errorf("bulk_buffer", c.BulkBufferRange, "%q is below 16KiB; use 0 (the kernel's sizing) or 16KiB..1GiB", *c.BulkBuffer)
	}
	s.bulkBuffer = int(buf)
	return s, nil
}

// readSecretFile reads a cluster secret file. A relative path is taken
// from the directory of the operator's config file, where the operator
// wrote it.
func readSecretFile(path, configFile string) ([]byte, error) {
	if path == "" {
		return nil, fmt.Errorf("empty path; name the file that holds the cluster secret")
	}
	if !filepath.IsAbs(path) && configFile != "" {
		path = filepath.Join(filepath.Dir(configFile), path)
	}
	return kit.ReadSecretFile(path, "make the file readable by the plugin, or set cluster_secret instead")
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

func checkAddrs(addrs []string) error {
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
	_, err := parseConfig(cfg)
	return err
}
