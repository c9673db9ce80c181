package sdk

import (
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/sdk/ring"
)

// Served traffic. A plugin that serves peers (the target of their writes
// and reads) says how much it served, per peer and rail, in its Stats,
// under names the host reads back: ServedPeersStat, whose presence says
// the plugin counts served traffic at all (a plugin without it is
// "unknown", not "served nothing"), and one ServedStat name per peer,
// rail, op and figure. sdk/kit's Served keeps and exports them.
//
// The host strips these from the plugin's generic counters and exports
// them as ferry_rail_served_bytes_total and
// ferry_rail_served_requests_total (transport, rail, op), and per peer in
// `ferry status` and `ferry top`.
const (
	// ServedPeersStat is how many peers the plugin keeps served counts
	// of (its presence marks a plugin that counts served traffic).
	ServedPeersStat = "served_peers"
	// ServedPrefix starts every per-peer served counter's name.
	ServedPrefix = "served."
	// ServedOtherPeer names the peers beyond ServedMaxPeers, counted
	// together, and UnknownPeer a peer that did not say who it is.
	ServedOtherPeer = "~other"
	UnknownPeer     = "~unknown"
	// ServedMaxPeers bounds the peers a plugin names in its Stats, so
	// that served counters stay within the host's bound on a Stats
	// answer (4096 counters): rails x 2 ops x 2 figures x peers.
	ServedMaxPeers = 64
	// ServedMaxPeerLen bounds a peer name in a counter's name (the host
	// refuses a Stats name over 256 bytes); a longer one is counted as
	// UnknownPeer.
	ServedMaxPeerLen = 128
)

// Figures of a served counter.
const (
	ServedBytes    = "bytes"
	ServedRequests = "requests"
)

// ServedKey names one served counter: what Stats names
// "served.<rail>.<op>.<figure>.<peer>" (peer last: an engine name may
// hold dots).
type ServedKey struct {
	Rail   int
	Op     ring.Op // ring.OpWrite (peers wrote into this engine) or ring.OpRead (peers read from it)
	Figure string  // ServedBytes or ServedRequests
	Peer   string
}

// Stat returns the Stats name of k.
func (k ServedKey) Stat() string {
	return ServedPrefix + strconv.Itoa(k.Rail) + "." + servedOp(k.Op) + "." + k.Figure + "." + k.Peer
}

func servedOp(op ring.Op) string {
	if op == ring.OpRead {
		return "read"
	}
	return "write"
}

// ParseServedStat returns the served counter a Stats name names; ok is
// false for any other name (or a malformed one, which the host then
// exports as a plain counter).
func ParseServedStat(name string) (k ServedKey, ok bool) {
	rest, found := strings.CutPrefix(name, ServedPrefix)
	if !found {
		return k, false
	}
	parts := strings.SplitN(rest, ".", 4)
	if len(parts) != 4 || parts[3] == "" {
		return k, false
	}
	rail, err := strconv.Atoi(parts[0])
	if err != nil || rail < 0 || strconv.Itoa(rail) != parts[0] {
		return k, false
	}
	switch parts[1] {
	case "write":
		k.Op = ring.OpWrite
	case "read":
		k.Op = ring.OpRead
	default:
		return k, false
	}
	switch parts[2] {
	case ServedBytes, ServedRequests:
	default:
		return k, false
	}
	k.Rail, k.Figure, k.Peer = rail, parts[2], parts[3]
	return k, true
}
