package tcp

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/ferrydev/ferry/sdk"
)

// Config is the plugin's `config { ... }` block:
//
//	config {
//	  listen               = ["127.0.0.1:0"]   # rail i = address i: accepts there, dials from its IP
//	  advertise            = []                # addresses peers dial; default: the bound listen addresses
//	  connections_per_peer = 2                 # per peer and rail, 1..64
//	  max_frame            = "64MiB"           # largest payload per frame, 4KiB..1GiB
//	  io_timeout           = "30s"             # longest wait without progress on a busy connection
//	}
//
// Every attribute is optional.
//
// Rails. Each listen address is one local rail, numbered in list order; a
// descriptor's Rail picks one. A rail dials each peer from its listen IP
// (unless that is a wildcard such as 0.0.0.0 or ::) towards the peer's
// advertised address with the longest common prefix, so that its traffic
// leaves through that address's interface. With advertise set, peers dial
// the advertised addresses; the rails stay the listen addresses.
type Config struct {
	Listen             []string `hcl:"listen,optional"`
	Advertise          []string `hcl:"advertise,optional"`
	ConnectionsPerPeer *int     `hcl:"connections_per_peer,optional"`
	MaxFrame           *string  `hcl:"max_frame,optional"`
	IOTimeout          *string  `hcl:"io_timeout,optional"`

	// Where each value sits in the operator's file, for diagnostics.
	ListenRange             hcl.Range `hcl:"listen,attr_value_range"`
	AdvertiseRange          hcl.Range `hcl:"advertise,attr_value_range"`
	ConnectionsPerPeerRange hcl.Range `hcl:"connections_per_peer,attr_value_range"`
	MaxFrameRange           hcl.Range `hcl:"max_frame,attr_value_range"`
	IOTimeoutRange          hcl.Range `hcl:"io_timeout,attr_value_range"`
}

// Defaults and limits of the configuration.
const (
	DefaultMaxFrame  = 64 << 20
	DefaultIOTimeout = 30 * time.Second
	DefaultConns     = 2
	MaxConns         = 64
	minMaxFrame      = 4 << 10
	maxMaxFrame      = 1 << 30
)

// settings is the validated configuration.
type settings struct {
	listen    []string
	advertise []string
	conns     int
	maxFrame  uint64
	ioTimeout time.Duration
}

func defaultSettings() settings {
	return settings{
		listen:    []string{"127.0.0.1:0"},
		conns:     DefaultConns,
		maxFrame:  DefaultMaxFrame,
		ioTimeout: DefaultIOTimeout,
	}
}

// parseConfig decodes and validates the plugin's block. Validation errors
// name the attribute and where the block starts in the operator's file.
func parseConfig(cfg sdk.StartConfig) (settings, error) {
	s := defaultSettings()
	if len(bytes.TrimSpace(cfg.Config)) == 0 {
		return s, nil
	}
	var c Config
	if err := sdk.DecodeConfig(cfg, &c); err != nil {
		return settings{}, fmt.Errorf("tcp config: %w", err)
	}
	// An error names the attribute and where its value sits in the
	// operator's file (or, failing that, where the block starts).
	bad := func(attr string, at hcl.Range, format string, args ...any) error {
		where := ""
		switch {
		case at.Filename != "" && at.Start.Line > 0:
			where = fmt.Sprintf("%s:%d:%d: ", at.Filename, at.Start.Line, at.Start.Column)
		case cfg.ConfigFile != "":
			where = fmt.Sprintf("%s:%d:%d: ", cfg.ConfigFile, cfg.ConfigLine, cfg.ConfigColumn)
		}
		return fmt.Errorf("%stcp config: %s: %s", where, attr, fmt.Sprintf(format, args...))
	}
	if c.Listen != nil {
		if len(c.Listen) == 0 {
			return settings{}, bad("listen", c.ListenRange, "needs at least one address")
		}
		if err := checkAddrs(c.Listen); err != nil {
			return settings{}, bad("listen", c.ListenRange, "%v", err)
		}
		s.listen = c.Listen
	}
	if len(c.Advertise) > 0 {
		if err := checkAddrs(c.Advertise); err != nil {
			return settings{}, bad("advertise", c.AdvertiseRange, "%v", err)
		}
		s.advertise = c.Advertise
	}
	if c.ConnectionsPerPeer != nil {
		n := *c.ConnectionsPerPeer
		if n < 1 || n > MaxConns {
			return settings{}, bad("connections_per_peer", c.ConnectionsPerPeerRange, "%d is outside 1..%d", n, MaxConns)
		}
		s.conns = n
	}
	if c.MaxFrame != nil {
		n, err := parseSize(*c.MaxFrame)
		if err != nil {
			return settings{}, bad("max_frame", c.MaxFrameRange, "%v", err)
		}
		if n < minMaxFrame || n > maxMaxFrame {
			return settings{}, bad("max_frame", c.MaxFrameRange, "%q is outside 4KiB..1GiB", *c.MaxFrame)
		}
		s.maxFrame = n
	}
	if c.IOTimeout != nil {
		d, err := time.ParseDuration(*c.IOTimeout)
		if err != nil {
			return settings{}, bad("io_timeout", c.IOTimeoutRange, "%v", err)
		}
		if d < time.Millisecond || d > time.Hour {
			return settings{}, bad("io_timeout", c.IOTimeoutRange, "%s is outside 1ms..1h", d)
		}
		s.ioTimeout = d
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

// parseSize reads "4096", "512KiB", "64MiB", "1GiB" (powers of two) or
// "64MB", "1GB" (powers of ten).
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   uint64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
		{"kB", 1e3}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9},
		{"B", 1},
	}
	mult := uint64(1)
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseUint(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: want a number of bytes with an optional unit (KiB, MiB, GiB, kB, MB, GB)", s)
	}
	if n > (1<<63)/mult {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return n * mult, nil
}
