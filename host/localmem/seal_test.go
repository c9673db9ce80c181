package localmem

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk"
)

// sealFake is a plugin that takes sealed regions, recording them.
type sealFake struct {
	*fakePlugin
	sealed map[uint32]uint64 // region -> the address it is written through
}

func newSealFake(name string) *sealFake {
	return &sealFake{fakePlugin: newFake(name), sealed: map[uint32]uint64{}}
}

func (f *sealFake) TakesSealed() bool { return true }

func (f *sealFake) RegisterSealed(_ context.Context, region uint32, fd int, length uint64, _ sdk.Perm, _ sdk.MemoryKind, _ int, addr uint64) error {
	if f.refuse {
		return errors.New("refused")
	}
	f.regions[region], f.fds[region], f.sealed[region] = 0, fd, addr
	return nil
}

// okAttach is a system that lets plugins attach.
var okAttach = AttachEnv{
	Scope:    func() ([]byte, error) { return []byte("0\n"), nil },
	Dumpable: func() (bool, error) { return true, nil },
	Grant:    func() error { return nil },
}

// TestSealedRegionNotWritableByReopening: with plugins that take sealed
// regions, a remote-read region (a part of an allocation, and a whole
// one) goes to them as a memfd of its own that nobody can write by
// reopening it read-write through /proc/self/fd, nor map writable; the
// application's memory stays writable and the file shows what it wrote.
// A remote-read-write or local region is not sealed; a replay after a
// plugin restart registers the sealed region sealed again.
func TestSealedRegionNotWritableByReopening(t *testing.T) {
	ctx := context.Background()
	tb := New("seal", time.Second)
	tb.SetAttachEnv(okAttach)
	defer tb.Close()
	part, err := tb.Allocate(4 * page)
	if err != nil {
		t.Fatal(err)
	}
	whole, err := tb.Allocate(2 * page)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := tb.Allocate(page)
	if err != nil {
		t.Fatal(err)
	}
	fill(part, 1)
	fill(whole, 2)
	pl := newSealFake("p")
	for _, r := range []struct {
		b    []byte
		perm sdk.Perm
	}{{part[page : 3*page], sdk.PermRemoteRead}, {whole, sdk.PermRemoteRead}, {rw, sdk.PermRemoteReadWrite}, {part[:page], sdk.PermLocal}} {
		if err := tb.Register(ctx, Addr(r.b), uintptr(len(r.b)), r.perm, []Plugin{pl}); err != nil {
			t.Fatal(err)
		}
	}
	if len(pl.sealed) != 2 || pl.sealed[1] != uint64(Addr(part[page:])) || pl.sealed[2] != uint64(Addr(whole)) {
		t.Fatalf("sealed registrations %v: want regions 1 and 2, each written through its own address", pl.sealed)
	}
	for id, mem := range map[uint32][]byte{1: part[page : 3*page], 2: whole} {
		fd := pl.fds[id]
		if got := fileSize(t, fd); got != int64(len(mem)) {
			t.Fatalf("region %d: file of %d bytes, want exactly the region's %d", id, got, len(mem))
		}
		rwfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err) // the open itself is allowed: the seal refuses what follows
		}
		if _, err := unix.Pwrite(rwfd, []byte("X"), 0); !errors.Is(err, unix.EPERM) {
			t.Errorf("region %d: write through a descriptor reopened read-write: %v, want EPERM", id, err)
		}
		if m, err := unix.Mmap(rwfd, 0, page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); !errors.Is(err, unix.EPERM) {
			if err == nil {
				unix.Munmap(m)
			}
			t.Errorf("region %d: shared writable mapping of a descriptor reopened read-write: %v, want EPERM", id, err)
		}
		unix.Close(rwfd)
		// The application writes; the file (what a peer maps) shows it.
		mem[0], mem[len(mem)-1] = 0xA5, 0x5A
		ro, err := unix.Mmap(fd, 0, len(mem), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ro, mem) {
			t.Errorf("region %d: the file does not hold what the application wrote", id)
		}
		unix.Munmap(ro)
	}
	if _, sealed := pl.sealed[3]; sealed {
		t.Error("a remote-read-write region was sealed")
	}
	// A restarted plugin gets every region again, the sealed ones sealed.
	again := newSealFake("p")
	if err := tb.Replay(ctx, again); err != nil {
		t.Fatal(err)
	}
	if len(again.regions) != 4 || len(again.sealed) != 2 {
		t.Fatalf("replay: %d regions, %d sealed; want 4 and 2", len(again.regions), len(again.sealed))
	}
	// Unregistered, the bytes go back to the allocation's memfd.
	want := bytes.Clone(whole)
	tb.Unregister(ctx, 2, []Plugin{pl}, nil)
	if !bytes.Equal(whole, want) {
		t.Fatal("unregistering a sealed whole allocation lost its bytes")
	}
	whole[0] = 1 // and it is writable as ever
}

// TestNotSealedWithoutEveryPlugin: a plugin that cannot take sealed
// regions (an older SDK), or a system that forbids plugins to attach,
// leaves remote-read regions unsealed, so that every plugin can map them.
func TestNotSealedWithoutEveryPlugin(t *testing.T) {
	ctx := context.Background()
	denied := okAttach
	denied.Scope = func() ([]byte, error) { return []byte("3\n"), nil }
	for _, c := range []struct {
		name    string
		env     AttachEnv
		plugins func() []Plugin
	}{
		{"an older plugin", okAttach, func() []Plugin { return []Plugin{newSealFake("new"), newFake("old")} }},
		{"attach denied", denied, func() []Plugin { return []Plugin{newSealFake("new")} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := New("noseal", time.Second)
			tb.SetAttachEnv(c.env)
			defer tb.Close()
			mem, err := tb.Allocate(2 * page)
			if err != nil {
				t.Fatal(err)
			}
			plugins := c.plugins()
			if err := tb.Register(ctx, Addr(mem), uintptr(len(mem)), sdk.PermRemoteRead, plugins); err != nil {
				t.Fatal(err)
			}
			if sf := plugins[0].(*sealFake); len(sf.sealed) != 0 {
				t.Fatalf("sealed although %s", c.name)
			}
		})
	}
}

// TestSealedInABatch: a batch's remote-read regions are sealed too, and
// go to each plugin alone beside the batch's others.
func TestSealedInABatch(t *testing.T) {
	ctx := context.Background()
	tb := New("sealbatch", time.Second)
	tb.SetAttachEnv(okAttach)
	defer tb.Close()
	mem, err := tb.Allocate(4 * page)
	if err != nil {
		t.Fatal(err)
	}
	pl := newSealFake("p")
	rs := []Range{{P: Addr(mem), N: uintptr(page), Perm: sdk.PermLocal}, {P: Addr(mem) + uintptr(page), N: uintptr(2 * page), Perm: sdk.PermRemoteRead}}
	if err := tb.RegisterBatch(ctx, rs, []Plugin{pl}); err != nil {
		t.Fatal(err)
	}
	if len(pl.regions) != 2 || len(pl.sealed) != 1 {
		t.Fatalf("%d regions, %d sealed; want 2 and 1", len(pl.regions), len(pl.sealed))
	}
	for id := range pl.sealed {
		if _, err := unix.Pwrite(pl.fds[id], []byte("X"), 0); err == nil {
			t.Fatal("the sealed region's file takes a write")
		}
	}
}
