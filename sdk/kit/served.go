package kit

import (
	"sync"
	"sync/atomic"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// Served counts the traffic a plugin serves as the target of its peers'
// requests, per peer and rail, and exports it in Stats under the names
// the host reads (sdk.ServedKey). The zero value is ready. A plugin
// takes a cell once per connection (Cell, a lock and a map look-up),
// then adds to it on the data path (ServedCell.Add: two atomic adds).
// Beyond sdk.ServedMaxPeers peers, the others share one cell named
// sdk.ServedOtherPeer, so that a plugin with many peers keeps its Stats
// within the host's bounds.
type Served struct {
	mu    sync.Mutex
	cells map[servedAt]*ServedCell
	peers map[string]bool
}

type servedAt struct {
	peer string
	rail int
}

// ServedCell is one peer's traffic served on one rail.
type ServedCell struct {
	writes, writeBytes atomic.Uint64
	reads, readBytes   atomic.Uint64
}

// Add counts requests of op served, of bytes in all: ring.OpWrite for
// writes applied to this engine's memory, ring.OpRead for reads answered
// from it. Only requests that moved their bytes are counted (not those
// refused).
func (c *ServedCell) Add(op ring.Op, requests, bytes uint64) {
	if op == ring.OpRead {
		c.reads.Add(requests)
		c.readBytes.Add(bytes)
		return
	}
	c.writes.Add(requests)
	c.writeBytes.Add(bytes)
}

// Cell returns the cell of peer (the initiator's engine name;
// sdk.UnknownPeer when it did not say) on rail.
func (s *Served) Cell(peer string, rail int) *ServedCell {
	if peer == "" || len(peer) > sdk.ServedMaxPeerLen {
		peer = sdk.UnknownPeer
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cells == nil {
		s.cells, s.peers = map[servedAt]*ServedCell{}, map[string]bool{}
	}
	if !s.peers[peer] && len(s.peers) >= sdk.ServedMaxPeers {
		peer = sdk.ServedOtherPeer
	}
	k := servedAt{peer, rail}
	c := s.cells[k]
	if c == nil {
		c = new(ServedCell)
		s.cells[k] = c
		s.peers[peer] = true
	}
	return c
}

// Export adds the served counters to m: sdk.ServedPeersStat, and each
// cell's figures (a figure still 0 is left out).
func (s *Served) Export(m map[string]uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m[sdk.ServedPeersStat] = uint64(len(s.peers))
	for k, c := range s.cells {
		put := func(op ring.Op, fig string, v uint64) {
			if v != 0 {
				m[sdk.ServedKey{Rail: k.rail, Op: op, Figure: fig, Peer: k.peer}.Stat()] = v
			}
		}
		put(ring.OpWrite, sdk.ServedRequests, c.writes.Load())
		put(ring.OpWrite, sdk.ServedBytes, c.writeBytes.Load())
		put(ring.OpRead, sdk.ServedRequests, c.reads.Load())
		put(ring.OpRead, sdk.ServedBytes, c.readBytes.Load())
	}
}
