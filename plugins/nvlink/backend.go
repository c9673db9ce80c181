package nvlink

import (
	"errors"
	"fmt"
	"sync"

	"github.com/ferrydev/ferry/plugins/simdev/simmem"
	"github.com/ferrydev/ferry/sdk"
)

// A backend is the device driver behind the transport: it imports a
// device handle into this process, and copies between imported device
// ranges and host memory on one of its streams. The transport chooses it
// by the handle's type (backendFor): "sim" for sdk.HandleSim, "cuda" for
// sdk.HandleCUDAFD and sdk.HandleCUDAIPC. Host memory (a registered
// region's mapping, a peer's memfd mapped here) is hostMem whatever the
// backend: the backend that copies it prepares it for DMA itself.
type backend interface {
	// name is the backend's name in logs and Stats ("sim", "cuda").
	name() string
	// importHandle opens h in this process and returns its range
	// [h.Offset, h.Offset+h.Length). A handle that no longer opens gives
	// an error wrapping sdk.ErrStaleHandle.
	importHandle(h sdk.Handle) (devMem, error)
	// copy copies n bytes from src at soff to dst at doff on stream
	// (0 <= stream < the transport's streams) and returns when they have
	// landed. The caller checked both ranges; one side at least is this
	// backend's devMem, the other its devMem or hostMem. copy is called
	// from the stream's own goroutine, which is locked to its OS thread.
	copy(stream int, dst memory, doff uint64, src memory, soff uint64, n uint64) error
	// close releases what the backend holds (streams, contexts).
	close()
}

// memory is one side of a copy: hostMem or a backend's devMem.
type memory interface {
	size() uint64
}

// devMem is an imported device range.
type devMem interface {
	memory
	// release unimports the range; nothing touches it afterwards.
	release() error
}

// hostMem is host memory: mapped by the SDK (a registered region) or by
// this plugin (a peer's memfd). A backend that needs it registered for
// DMA (cuda) registers it on first use and keeps the registration in reg
// until drop.
type hostMem struct {
	b        []byte
	readOnly bool // mapped without write permission: a peer's remote-read region

	mu  sync.Mutex
	reg func() // undoes a backend's registration; nil while none
}

func (h *hostMem) size() uint64 { return uint64(len(h.b)) }

// drop undoes a backend's registration of h, before its memory goes.
func (h *hostMem) drop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reg != nil {
		h.reg()
		h.reg = nil
	}
}

// errMixed is a copy between device memory of two backends (a simulated
// device and a real one): no driver moves those bytes.
var errMixed = errors.New("copy between memory of two device backends")

// simBackend is the SIMULATED device backend: device memory is a
// simulated device's memfd (plugins/simdev), imported with simmem.Open
// and copied with copy(). It exists so that the transport's exchange,
// checks and slicing run in CI without a GPU; it is named "sim"
// everywhere it shows.
type simBackend struct{}

type simMem struct{ m *simmem.Mapping }

func (s simMem) size() uint64   { return uint64(len(s.m.Bytes())) }
func (s simMem) release() error { return s.m.Close() }

func (simBackend) name() string { return "sim" }

func (simBackend) importHandle(h sdk.Handle) (devMem, error) {
	m, err := simmem.Open(h)
	if err != nil {
		return nil, err
	}
	return simMem{m}, nil
}

func (simBackend) copy(_ int, dst memory, doff uint64, src memory, soff uint64, n uint64) error {
	d, err := simBytes(dst)
	if err != nil {
		return err
	}
	s, err := simBytes(src)
	if err != nil {
		return err
	}
	copy(d[doff:doff+n:doff+n], s[soff:soff+n:soff+n])
	return nil
}

func simBytes(m memory) ([]byte, error) {
	switch m := m.(type) {
	case *hostMem:
		return m.b, nil
	case simMem:
		return m.m.Bytes(), nil
	}
	return nil, fmt.Errorf("%w: the sim backend cannot reach %T", errMixed, m)
}

func (simBackend) close() {}
