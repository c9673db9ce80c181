package nvlink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/plugins/nvlink/internal/cuda"
	"github.com/ferrydev/ferry/sdk"
)

// cudaBackend is the real backend: libcuda loaded at run time
// (internal/cuda). Imports:
//   - sdk.HandleCUDAIPC: Data is the 64-byte legacy IPC handle
//     (cuIpcGetMemHandle of the allocation's base); cuIpcOpenMemHandle,
//     142 ms, which is why imports are cached.
//   - sdk.HandleCUDAFD: Data is the exporting process's pid and the fd
//     number of the allocation's POSIX fd (cuMemExportToShareableHandle),
//     little-endian uint32 then uint32 (8 bytes; more is refused). The fd
//     is taken with pidfd_getfd (same user, ptrace access to the
//     exporter), imported with cuMemImportFromShareableHandle and mapped
//     whole (Size bytes, granularity-aligned by its exporter).
//
// Handle.Device is taken as this process's ordinal of the exporting
// device: exporter and plugin must see the same CUDA_VISIBLE_DEVICES.
// Copies run cuMemcpyAsync on one stream per (transport stream, device)
// and wait for it on the stream's goroutine, which is locked to its OS
// thread; the device's primary context is pushed around every call.
// Host memory is registered with cuMemHostRegister on first use and
// unregistered when the region or the peer's mapping goes.
type cudaBackend struct {
	drv *cuda.Driver

	mu      sync.Mutex
	ctxs    map[int]*cuda.Context
	streams map[[2]int]*cuda.Stream // (transport stream, device)
}

func newCUDABackend() (*cudaBackend, error) {
	drv, err := cuda.Load()
	if err != nil {
		return nil, err
	}
	return &cudaBackend{drv: drv, ctxs: map[int]*cuda.Context{}, streams: map[[2]int]*cuda.Stream{}}, nil
}

func (b *cudaBackend) name() string { return "cuda" }

func (b *cudaBackend) context(dev int) (*cuda.Context, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c, ok := b.ctxs[dev]; ok {
		return c, nil
	}
	if dev < 0 || dev >= b.drv.Devices {
		return nil, fmt.Errorf("%w: device %d (this process sees %d)", sdk.ErrNoDevice, dev, b.drv.Devices)
	}
	c, err := b.drv.Retain(dev)
	if err != nil {
		return nil, err
	}
	b.ctxs[dev] = c
	return c, nil
}

// cudaMem is an imported range: ptr is its first byte.
type cudaMem struct {
	b     *cudaBackend
	ctx   *cuda.Context
	base  uint64
	ptr   uint64
	n     uint64
	whole uint64 // HandleCUDAFD: the mapped allocation's size; 0 for IPC
}

func (m *cudaMem) size() uint64 { return m.n }

func (m *cudaMem) release() error {
	return m.ctx.Do(func() error {
		if m.whole != 0 {
			return cuda.UnmapFD(m.base, m.whole)
		}
		return cuda.CloseIPC(m.base)
	})
}

func (b *cudaBackend) importHandle(h sdk.Handle) (devMem, error) {
	ctx, err := b.context(h.Device)
	if err != nil {
		return nil, err
	}
	m := &cudaMem{b: b, ctx: ctx, n: h.Length}
	switch h.Type {
	case sdk.HandleCUDAIPC:
		err = ctx.Do(func() error {
			base, err := cuda.OpenIPC(h.Data)
			m.base = base
			return err
		})
		var ce *cuda.Error
		if errors.As(err, &ce) {
			// The driver does not say why an open fails; a freed
			// allocation or an exporter gone is by far the likeliest.
			return nil, fmt.Errorf("%w (or not a handle of this machine's device %d): %w", sdk.ErrStaleHandle, h.Device, err)
		}
	case sdk.HandleCUDAFD:
		fd, ferr := takeFD(h.Data)
		if ferr != nil {
			return nil, ferr
		}
		defer unix.Close(fd)
		m.whole = h.Size
		err = ctx.Do(func() error {
			base, err := cuda.ImportFD(fd, h.Size, h.Device)
			m.base = base
			return err
		})
	default:
		return nil, fmt.Errorf("the cuda backend does not import %q handles", h.Type)
	}
	if err != nil {
		return nil, err
	}
	m.ptr = m.base + h.Offset
	return m, nil
}

// takeFD takes the fd a HandleCUDAFD names out of its exporter.
func takeFD(data []byte) (int, error) {
	if len(data) != 8 {
		return -1, fmt.Errorf("a %s handle's data is pid and fd (8 bytes), not %d bytes", sdk.HandleCUDAFD, len(data))
	}
	pid, fd := int(binary.LittleEndian.Uint32(data)), int(binary.LittleEndian.Uint32(data[4:]))
	if pid <= 0 || pid > 1<<30 || fd > 1<<30 {
		return -1, fmt.Errorf("a %s handle names pid %d fd %d", sdk.HandleCUDAFD, pid, fd)
	}
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return -1, fmt.Errorf("%w: exporter pid %d is gone", sdk.ErrStaleHandle, pid)
		}
		return -1, fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	defer unix.Close(pfd)
	got, err := unix.PidfdGetfd(pfd, fd, 0)
	if err != nil {
		if errors.Is(err, unix.EBADF) || errors.Is(err, unix.ESRCH) {
			return -1, fmt.Errorf("%w: fd %d of pid %d is closed", sdk.ErrStaleHandle, fd, pid)
		}
		return -1, fmt.Errorf("pidfd_getfd(pid %d, fd %d): %w (same user and ptrace access needed)", pid, fd, err)
	}
	return got, nil
}

// pointer is m's address for a copy on ctx, registering host memory on
// first use.
func (b *cudaBackend) pointer(ctx *cuda.Context, m memory) (uint64, error) {
	switch m := m.(type) {
	case *cudaMem:
		return m.ptr, nil
	case *hostMem:
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.reg == nil {
			if err := cuda.HostRegister(m.b, m.readOnly); err != nil {
				return 0, err
			}
			b := m.b
			m.reg = func() { _ = ctx.Do(func() error { return cuda.HostUnregister(b) }) }
		}
		return cuda.HostPointer(m.b), nil
	}
	return 0, fmt.Errorf("%w: the cuda backend cannot reach %T", errMixed, m)
}

func (b *cudaBackend) copy(stream int, dst memory, doff uint64, src memory, soff uint64, n uint64) error {
	dm, ok := dst.(*cudaMem)
	if !ok {
		if dm, ok = src.(*cudaMem); !ok {
			return fmt.Errorf("%w: no cuda memory on either side", errMixed)
		}
	}
	ctx := dm.ctx
	return ctx.Do(func() error {
		s, err := b.stream(stream, ctx)
		if err != nil {
			return err
		}
		d, err := b.pointer(ctx, dst)
		if err != nil {
			return err
		}
		sp, err := b.pointer(ctx, src)
		if err != nil {
			return err
		}
		return s.Copy(d+doff, sp+soff, n)
	})
}

// stream is stream i's CUDA stream on ctx's device; inside ctx.Do.
func (b *cudaBackend) stream(i int, ctx *cuda.Context) (*cuda.Stream, error) {
	key := [2]int{i, ctx.Ordinal()}
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.streams[key]; ok {
		return s, nil
	}
	s, err := cuda.NewStream()
	if err != nil {
		return nil, err
	}
	b.streams[key] = s
	return s, nil
}

func (b *cudaBackend) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for key, s := range b.streams {
		_ = b.ctxs[key[1]].Do(s.Destroy)
	}
	for _, c := range b.ctxs {
		_ = c.Release()
	}
	clear(b.streams)
	clear(b.ctxs)
}
