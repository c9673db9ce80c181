package pluginclient

import (
	"fmt"
	"math"
	"unicode/utf8"
)

// Caps on what a plugin chooses the size of in its answers, beyond
// gRPC's 4 MiB per message. The host keeps these for the plugin's life,
// publishes some in its descriptor (the endpoint, the rails) and repeats
// them in status, logs and errors, so each is far above what a real
// plugin sends. A refusal names the field and its size, never its
// content. Describe's strings and lists are capped in host/loader.
const (
	// MaxProbeReason bounds Probe's reason ("unavailable: ...").
	MaxProbeReason = 1024
	// MaxRails bounds the rails Probe lists, MaxRailName each one's name.
	MaxRails    = 256
	MaxRailName = 256
	// MaxEndpoint bounds the endpoint blob Start returns; it goes into
	// the descriptor, whose readers cap it the same (segment.MaxEndpoint).
	MaxEndpoint = 64 << 10
	// MaxCounters bounds the counters Stats returns (tcp reports 7 for
	// each of up to MaxRails rails, and its own), MaxCounterName each
	// one's name.
	MaxCounters    = 4096
	MaxCounterName = 256
	// MaxErrorText bounds the text of a plugin's error that the host
	// keeps; the rest is cut, and the cut says how much.
	MaxErrorText = 1024
	// MaxRailNUMANode bounds a rail's NUMA node (-1: unknown): Linux
	// numbers at most 1024 nodes (CONFIG_NODES_SHIFT 10).
	MaxRailNUMANode = 1023
	// MaxRailGbps bounds a rail's bandwidth (0: unknown): 100 Tbit/s, far
	// above any link. The rail picker divides by it; a NaN, an infinity
	// or a negative rate would make every pick wrong.
	MaxRailGbps = 100_000
)

// checkRail refuses a rail whose numbers are out of bounds.
func checkRail(name string, i int, numa int32, gbps float64) error {
	if numa < -1 || numa > MaxRailNUMANode {
		return fmt.Errorf("plugin %q probes out of bounds: its rail %d's NUMA node is %d, outside -1 (unknown) to %d; the plugin is faulty or not a Ferry plugin", name, i, numa, MaxRailNUMANode)
	}
	if math.IsNaN(gbps) || gbps < 0 || gbps > MaxRailGbps {
		return fmt.Errorf("plugin %q probes out of bounds: its rail %d's bandwidth is %v Gbit/s, outside 0 (unknown) to %d; the plugin is faulty or not a Ferry plugin", name, i, gbps, MaxRailGbps)
	}
	return nil
}

func checkProbe(name string, reason string, rails int) error {
	if len(reason) > MaxProbeReason {
		return fmt.Errorf("plugin %q probes out of bounds: its reason is %d bytes, over the cap of %d; the plugin is faulty or not a Ferry plugin", name, len(reason), MaxProbeReason)
	}
	if rails > MaxRails {
		return fmt.Errorf("plugin %q probes out of bounds: it lists %d rails, over the cap of %d; the plugin is faulty or not a Ferry plugin", name, rails, MaxRails)
	}
	return nil
}

// clip cuts a plugin's error text to MaxErrorText bytes, at a rune
// boundary, saying how much was cut.
func clip(s string) string {
	if len(s) <= MaxErrorText {
		return s
	}
	cut := MaxErrorText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s... (%d more bytes cut)", s[:cut], len(s)-cut)
}
