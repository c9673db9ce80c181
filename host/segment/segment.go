package segment

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ferrydev/ferry/sdk"
)

// SchemaVersion is the newest version of the descriptor JSON this code
// reads. It writes the oldest that carries the descriptor: 1, or 2 for a
// buffer list packed past PackAbove buffers (see BufferList), so that
// engines that read only 1 still read descriptors of the sizes they knew.
// A descriptor of a newer schema is refused with a clear error.
const SchemaVersion = SchemaPacked

// Permissions of a buffer: the SDK's Perm, which a descriptor's JSON
// carries as its text form ("local", "remote-read", "remote-read-write").
const (
	PermLocal           = sdk.PermLocal
	PermRemoteRead      = sdk.PermRemoteRead
	PermRemoteReadWrite = sdk.PermRemoteReadWrite
)

// Buffer is one registered range of a segment.
type Buffer struct {
	Region   uint32         `json:"region"`
	Base     uint64         `json:"base"` // the owner's virtual address
	Length   uint64         `json:"length"`
	Perm     sdk.Perm       `json:"perm"`
	Location sdk.MemoryKind `json:"location"`
	// Foreign: memory its application allocated itself, which only a
	// transport that declares sdk.Info.ForeignMemory reaches (one extra
	// copy); omitted for memory from Engine.Allocate, and by older writers.
	Foreign bool `json:"foreign,omitempty"`
}

// Descriptor is what an engine publishes about itself.
type Descriptor struct {
	Schema      int               `json:"schema"`
	Name        string            `json:"name"`
	Incarnation uint64            `json:"incarnation"`
	MachineID   string            `json:"machine_id"`
	Buffers     BufferList        `json:"buffers"`
	Transports  map[string][]byte `json:"transports"` // plugin name -> endpoint blob
	// Control is the host:port of the engine's control service
	// (host/control). Added within schema 1: it is optional, readers that
	// predate it ignore it, and "" means the engine serves none.
	Control string `json:"control,omitempty"`
	// Topology is what the engine's machine offers, as sysfs says; nil
	// when unknown. Rails lists each transport's rails. Both added within
	// schema 1, optional.
	Topology *Topology             `json:"topology,omitempty"`
	Rails    map[string][]RailInfo `json:"rails,omitempty"`
	// Seq orders the publications of one name: it only grows, across
	// the engine's restarts too (see Newer). A signed descriptor's MAC
	// covers it with the rest of the JSON, so that a peer with the
	// cluster secret can refuse an older one replayed. Added within
	// schema 1, optional: 0 is an engine that predates it.
	Seq uint64 `json:"seq,omitempty"`
	// StagingSlot is the bytes of one of the engine's staging slots
	// (host/staging): a peer's staged request into or out of its device
	// memory is cut in slices of at most this. 0: it has none (no device
	// memory registered). Added within schema 1, optional.
	StagingSlot uint64 `json:"staging_slot,omitempty"`
}

// NextSeq returns the Seq of a publication that follows one of prev: the
// publisher's wall clock in nanoseconds, or prev+1 when the clock has not
// passed prev. An engine that restarts therefore publishes above its
// previous life, unless the clock stepped back by more than the time
// between the two lives (peers that saw the previous life then take the
// new one once the clock passes it).
func NextSeq(prev uint64, nowUnixNano int64) uint64 {
	if now := uint64(max(nowUnixNano, 0)); now > prev {
		return now
	}
	return prev + 1
}

// Older reports whether d was published before seen, as their Seq say.
// Only a signed Seq means anything: a reader without the cluster secret
// must not order by it, since anyone could write the largest.
func Older(d, seen *Descriptor) bool { return d.Seq < seen.Seq }

// Topology is a machine's NUMA nodes and network interfaces.
type Topology struct {
	NUMANodes []NUMANode `json:"numa_nodes,omitempty"`
	NICs      []NIC      `json:"nics,omitempty"`
}

// NUMANode is one NUMA node and its CPUs, as sysfs lists them ("0-31").
type NUMANode struct {
	ID   int    `json:"id"`
	CPUs string `json:"cpus"`
}

// NIC is one network interface.
type NIC struct {
	Name      string   `json:"name"`
	NUMANode  int      `json:"numa_node"`  // -1 unknown
	SpeedMbps int      `json:"speed_mbps"` // -1 unknown
	Virtual   bool     `json:"virtual,omitempty"`
	Addrs     []string `json:"addrs,omitempty"`
}

// RailInfo is one rail of a transport.
type RailInfo struct {
	Name          string  `json:"name"`
	Label         string  `json:"label,omitempty"`
	NUMANode      int     `json:"numa_node"`
	BandwidthGbps float64 `json:"bandwidth_gbps,omitempty"`
}

// Encode returns the descriptor as JSON, under the oldest schema that
// carries its buffer list (whatever d.Schema says).
func (d *Descriptor) Encode() ([]byte, error) {
	c := *d
	c.Schema = schemaFor(len(d.Buffers))
	return json.Marshal(&c)
}

// Caps on a descriptor read from outside: the embedded metastore's
// largest value, and a count of buffers far above what an engine
// registers (each costs about 120 bytes of JSON).
const (
	MaxDescriptorSize = 4 << 20
	MaxBuffers        = 1 << 15
)

// Decode parses and checks a descriptor read from a metastore or a peer.
// key names where it came from, for error messages.
func Decode(key string, b []byte) (*Descriptor, error) {
	if len(b) > MaxDescriptorSize {
		return nil, fmt.Errorf("descriptor at %q is %d bytes, more than the %d a descriptor may have: it was not written by a Ferry engine", key, len(b), MaxDescriptorSize)
	}
	var d Descriptor
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("descriptor at %q is not a Ferry segment descriptor: %w", key, err)
	}
	if d.Schema > SchemaVersion {
		return nil, fmt.Errorf("descriptor at %q has schema version %d, this engine reads up to %d: upgrade this engine", key, d.Schema, SchemaVersion)
	}
	if d.Schema < 1 || d.Name == "" || d.Incarnation == 0 {
		return nil, fmt.Errorf("descriptor at %q is incomplete (schema %d, name %q, incarnation %d): it was not written by a Ferry engine", key, d.Schema, d.Name, d.Incarnation)
	}
	if len(d.Buffers) > MaxBuffers {
		return nil, fmt.Errorf("descriptor at %q lists %d buffers, more than the %d a descriptor may have", key, len(d.Buffers), MaxBuffers)
	}
	if err := checkLimits(key, &d); err != nil {
		return nil, err
	}
	sort.Slice(d.Buffers, func(i, j int) bool { return d.Buffers[i].Base < d.Buffers[j].Base })
	for i, b := range d.Buffers {
		if b.Length == 0 || b.Base+b.Length < b.Base {
			return nil, fmt.Errorf("descriptor at %q: buffer %d has a bad range base %#x length %d", key, i, b.Base, b.Length)
		}
		if i > 0 && d.Buffers[i-1].Base+d.Buffers[i-1].Length > b.Base {
			return nil, fmt.Errorf("descriptor at %q: buffers %d and %d overlap", key, i-1, i)
		}
		switch b.Perm {
		case PermLocal, PermRemoteRead, PermRemoteReadWrite:
		default:
			return nil, fmt.Errorf("descriptor at %q: buffer %d has unknown permission %q", key, i, b.Perm)
		}
	}
	return &d, nil
}

// Lookup errors. The engine wraps them with the segment and address.
var (
	ErrNoBuffer    = errors.New("no registered buffer at this address")
	ErrOutOfBounds = errors.New("range runs past the end of its buffer")
	ErrPermission  = errors.New("buffer does not allow this access")
)

// Find returns the buffer of sorted bufs that contains addr, or -1. It
// allocates nothing.
func Find(bufs []Buffer, addr uint64) int {
	i := sort.Search(len(bufs), func(i int) bool { return bufs[i].Base+bufs[i].Length > addr })
	if i < len(bufs) && bufs[i].Base <= addr {
		return i
	}
	return -1
}

// Translate maps [addr, addr+length) of a remote segment to a region and
// offset, checking that the whole range lies in one buffer and that the
// buffer allows the access (write=true for a write into the segment).
func Translate(bufs []Buffer, addr, length uint64, write bool) (region uint32, offset uint64, err error) {
	if addr+length < addr {
		return 0, 0, ErrOutOfBounds
	}
	i := Find(bufs, addr)
	if i < 0 {
		return 0, 0, ErrNoBuffer
	}
	b := &bufs[i]
	if addr+length > b.Base+b.Length {
		return 0, 0, ErrOutOfBounds
	}
	switch {
	case b.Perm == PermLocal:
		return 0, 0, ErrPermission
	case write && b.Perm != PermRemoteReadWrite:
		return 0, 0, ErrPermission
	}
	return b.Region, addr - b.Base, nil
}

// Key returns the metastore key for a segment name under prefix.
func Key(prefix, name string) string {
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return prefix + "segments/" + name
}
