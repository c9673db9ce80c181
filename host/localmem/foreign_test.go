package localmem

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/sdk"
)

// foreignFake is a plugin that takes foreign memory (or says it does not).
type foreignFake struct {
	*fakePlugin
	takes   bool
	foreign map[uint32][3]uint64 // region -> pid, addr, length
}

func newForeignFake(name string, takes bool) *foreignFake {
	return &foreignFake{fakePlugin: newFake(name), takes: takes, foreign: map[uint32][3]uint64{}}
}

func (f *foreignFake) TakesForeign() bool { return f.takes }

func (f *foreignFake) RegisterForeign(_ context.Context, region uint32, pid int, addr, length uint64, _ sdk.Perm, _ sdk.MemoryKind) error {
	if f.refuse {
		return errors.New("permission denied")
	}
	f.foreign[region] = [3]uint64{uint64(pid), addr, length}
	return nil
}

func (f *foreignFake) UnregisterMemory(ctx context.Context, region uint32) error {
	delete(f.foreign, region)
	return f.fakePlugin.UnregisterMemory(ctx, region)
}

// env is an AttachEnv over plain data.
type env struct {
	scope    string // "" with noYama: the file does not exist
	noYama   bool
	dumpable bool
	grantErr error
	grants   int
}

func (e *env) attach() AttachEnv {
	return AttachEnv{
		Scope: func() ([]byte, error) {
			if e.noYama {
				return nil, fmt.Errorf("open: %w", os.ErrNotExist)
			}
			return []byte(e.scope + "\n"), nil
		},
		Dumpable: func() (bool, error) { return e.dumpable, nil },
		Grant: func() error {
			e.grants++
			return e.grantErr
		},
	}
}

// TestAttachVerdict: each ptrace scope's answer.
func TestAttachVerdict(t *testing.T) {
	for _, c := range []struct {
		name     string
		yama     bool
		scope    string
		dumpable bool
		grant    bool
		err      string // "" : allowed
	}{
		{"no yama", false, "", true, false, ""},
		{"scope 0", true, "0", true, false, ""},
		{"scope 1", true, "1\n", true, true, ""},
		{"scope 2", true, "2", true, false, "kernel.yama.ptrace_scope is 2"},
		{"scope 3", true, "3", true, false, "kernel.yama.ptrace_scope is 3"},
		{"unknown scope", true, "9", true, false, `kernel.yama.ptrace_scope reads "9"`},
		{"not dumpable", false, "", false, false, "not dumpable"},
		{"not dumpable, scope 1", true, "1", false, false, "not dumpable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			grant, err := AttachVerdict(c.yama, c.scope, c.dumpable)
			if grant != c.grant {
				t.Errorf("grant %v, want %v", grant, c.grant)
			}
			switch {
			case c.err == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case c.err != "" && (!errors.Is(err, ErrAttachDenied) || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "Engine.Allocate")):
				t.Errorf("error %v, want ErrAttachDenied saying %q and what to do", err, c.err)
			}
		})
	}
}

// TestRegisterForeign registers memory the table did not allocate: it
// goes to the plugins that take it only, with this process's pid, and
// leaves with Remove; the bad inputs are refused and touch nothing.
func TestRegisterForeign(t *testing.T) {
	ctx := context.Background()
	tb := New("t", time.Second)
	defer tb.Close()
	sys := &env{scope: "1", dumpable: true}
	tb.SetAttachEnv(sys.attach())
	tcp, shm := newForeignFake("tcp", true), newForeignFake("shm", false)
	plain := newFake("old") // a plugin without the interface at all
	plugins := []Plugin{tcp, shm, plain}

	heap := make([]byte, 8192)
	hp := unsafe.Pointer(&heap[0])
	if err := tb.RegisterForeign(ctx, hp, 4096, sdk.PermRemoteRead, plugins); err != nil {
		t.Fatal(err)
	}
	if sys.grants != 1 {
		t.Errorf("scope 1: %d grants, want 1", sys.grants)
	}
	want := [3]uint64{uint64(os.Getpid()), uint64(uintptr(hp)), 4096}
	if len(tcp.foreign) != 1 || tcp.foreign[1] != want || len(shm.foreign) != 0 || len(shm.regions) != 0 || len(plain.regions) != 0 {
		t.Fatalf("registered with tcp %v, shm %v %v, old %v; want tcp only, %v", tcp.foreign, shm.foreign, shm.regions, plain.regions, want)
	}
	bufs := tb.Buffers()
	if len(bufs) != 1 || !bufs[0].Foreign || bufs[0].Base != uint64(uintptr(hp)) {
		t.Fatalf("buffers %+v", bufs)
	}
	if reg, off, ok := tb.Lookup(uint64(uintptr(hp))+100, 10); !ok || reg != 1 || off != 100 {
		t.Fatalf("lookup: %d %d %v", reg, off, ok)
	}
	if !tb.Foreign(uint64(uintptr(hp))+100, 10) || tb.Foreign(uint64(uintptr(hp))+4090, 10) {
		t.Fatal("Foreign answers wrong")
	}
	if got := Reaching(bufs[0], plugins); len(got) != 1 || got[0] != Plugin(tcp) {
		t.Fatalf("Reaching a foreign buffer: %v, want tcp", got)
	}

	mem, err := tb.Allocate(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	ap := unsafe.Pointer(&mem[0])
	for _, c := range []struct {
		name string
		p    unsafe.Pointer
		n    uintptr
		pl   []Plugin
		env  *env
		is   error
		text string
	}{
		{"overlapping foreign", unsafe.Add(hp, 4000), 200, plugins, sys, ErrInvalid, "overlaps the buffer registered"},
		{"overlapping an allocation's start", unsafe.Add(ap, -100), 200, plugins, sys, ErrInvalid, "overlaps memory from Engine.Allocate"},
		{"overlapping an allocation's end", unsafe.Add(ap, 1<<16-100), 200, plugins, sys, ErrInvalid, "overlaps memory from Engine.Allocate"},
		{"no plugin takes it", unsafe.Add(hp, 4096), 100, []Plugin{shm, plain}, sys, ErrNotRegistered, "allocate transfer buffers with Engine.Allocate"},
		{"scope 2", unsafe.Add(hp, 4096), 100, plugins, &env{scope: "2", dumpable: true}, ErrAttachDenied, "kernel.yama.ptrace_scope"},
		{"scope 3", unsafe.Add(hp, 4096), 100, plugins, &env{scope: "3", dumpable: true}, ErrAttachDenied, "kernel.yama.ptrace_scope"},
		{"not dumpable", unsafe.Add(hp, 4096), 100, plugins, &env{noYama: true}, ErrAttachDenied, "not dumpable"},
		{"grant fails", unsafe.Add(hp, 4096), 100, plugins, &env{scope: "1", dumpable: true, grantErr: errors.New("EINVAL")}, ErrAttachDenied, "PR_SET_PTRACER"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb.SetAttachEnv(c.env.attach())
			defer tb.SetAttachEnv(sys.attach())
			err := tb.RegisterForeign(ctx, c.p, c.n, sdk.PermLocal, c.pl)
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("error %v, want %v saying %q", err, c.is, c.text)
			}
			if len(tb.Buffers()) != 1 || len(tcp.foreign) != 1 {
				t.Fatalf("a refused registration left buffers %v, tcp %v", tb.Buffers(), tcp.foreign)
			}
		})
	}
	// Memory from Allocate overlapping foreign memory is refused too.
	if tb.InAllocation(uintptr(hp), 10) || !tb.InAllocation(uintptr(ap)+10, 10) {
		t.Fatal("InAllocation answers wrong")
	}

	// A plugin that refuses rolls the others back.
	refusing := newForeignFake("rdma-ish", true)
	refusing.refuse = true
	err = tb.RegisterForeign(ctx, unsafe.Add(hp, 4096), 100, sdk.PermLocal, []Plugin{tcp, refusing})
	if !errors.Is(err, ErrPluginFailed) || !strings.Contains(err.Error(), "kernel.yama.ptrace_scope") {
		t.Fatalf("refused by a plugin: %v", err)
	}
	if len(tcp.foreign) != 1 || len(tb.Buffers()) != 1 {
		t.Fatalf("after a refusal: tcp %v, buffers %v", tcp.foreign, tb.Buffers())
	}

	// A restarted plugin gets the foreign buffer again, with its region id;
	// one that does not take foreign memory does not.
	again, shmAgain := newForeignFake("tcp", true), newForeignFake("shm", false)
	if err := tb.Replay(ctx, again); err != nil {
		t.Fatal(err)
	}
	if err := tb.Replay(ctx, shmAgain); err != nil {
		t.Fatal(err)
	}
	if again.foreign[1] != want || len(shmAgain.foreign) != 0 {
		t.Fatalf("replay: tcp %v, shm %v", again.foreign, shmAgain.foreign)
	}

	b, err := tb.Remove(uint64(uintptr(hp)))
	if err != nil || !b.Foreign {
		t.Fatalf("remove: %+v, %v", b, err)
	}
	tb.Unregister(ctx, b.Region, Reaching(b, plugins), func(p Plugin, err error) { t.Errorf("unregister with %s: %v", p.Name(), err) })
	tb.Unpin(b.Region)
	if len(tcp.foreign) != 0 {
		t.Fatalf("tcp still holds %v", tcp.foreign)
	}
}

// localOnlyFake takes foreign memory for its own descriptors only (shm).
type localOnlyFake struct{ *foreignFake }

func (localOnlyFake) ForeignLocalOnly() bool { return true }

// TestRegisterForeignLocalOnly: a plugin that reaches app memory only for
// this engine's own descriptors gets LocalOnly app memory, beside tcp or
// alone; app memory peers may use is refused when no running plugin can
// serve it to them, naming what to do, and nothing is registered.
func TestRegisterForeignLocalOnly(t *testing.T) {
	ctx := context.Background()
	tb := New("t", time.Second)
	defer tb.Close()
	sys := &env{scope: "0", dumpable: true}
	tb.SetAttachEnv(sys.attach())
	tcp, shm := newForeignFake("tcp", true), localOnlyFake{newForeignFake("shm", true)}
	heap := make([]byte, 3*4096)
	hp := unsafe.Pointer(&heap[0])

	err := tb.RegisterForeign(ctx, hp, 4096, sdk.PermRemoteRead, []Plugin{shm})
	if !errors.Is(err, ErrNotRegistered) || !strings.Contains(err.Error(), "register it LocalOnly") || !strings.Contains(err.Error(), "Engine.Allocate") {
		t.Fatalf("app memory for peers with a local-only plugin alone: %v, want ErrNotRegistered naming LocalOnly and Engine.Allocate", err)
	}
	if len(tb.Buffers()) != 0 || len(shm.foreign) != 0 {
		t.Fatalf("a refused registration left buffers %v, shm %v", tb.Buffers(), shm.foreign)
	}
	if err := tb.RegisterForeign(ctx, hp, 4096, sdk.PermLocal, []Plugin{shm}); err != nil {
		t.Fatalf("LocalOnly app memory with shm alone: %v", err)
	}
	if err := tb.RegisterForeign(ctx, unsafe.Add(hp, 4096), 4096, sdk.PermRemoteReadWrite, []Plugin{tcp, shm}); err != nil {
		t.Fatalf("app memory for peers with tcp beside shm: %v", err)
	}
	if len(shm.foreign) != 2 || len(tcp.foreign) != 1 {
		t.Fatalf("registered with shm %v, tcp %v; want shm both, tcp the second", shm.foreign, tcp.foreign)
	}
}
