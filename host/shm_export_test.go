package host

import "github.com/ferrydev/ferry/host/segment"

// PluginEndpoint returns what the named plugin's current run returned from
// Start (its endpoint blob), nil when it has none. Tests use it to reach
// a plugin's socket the way a process that is not an engine would.
func PluginEndpoint(e *Engine, name string) []byte {
	ps := e.x.Plugin(name)
	if ps == nil {
		return nil
	}
	return ps.Endpoint()
}

// LocalBuffers returns e's registered buffers with their region ids.
func LocalBuffers(e *Engine) []segment.Buffer { return e.mem.Buffers() }

// PeerEndpoint returns the named plugin's endpoint in the descriptor e
// holds for the open segment id, nil when there is none.
func PeerEndpoint(e *Engine, id SegmentID, plugin string) []byte {
	h := e.segs.Get(uint32(id))
	if h == nil || h.Desc == nil {
		return nil
	}
	return h.Desc.Transports[plugin]
}
