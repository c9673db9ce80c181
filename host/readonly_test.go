package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/host"
)

// regionFiles returns the paths, under /proc/PID/fd, of pid's descriptors
// of e's carved region memfds (memfd:ferry-<name>-region).
func regionFiles(t *testing.T, pid int, name string) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ent := range ents {
		p := filepath.Join(dir, ent.Name())
		if l, err := os.Readlink(p); err == nil && strings.Contains(l, "memfd:ferry-"+name+"-region") {
			out = append(out, p)
		}
	}
	return out
}

// reopenWrite is the attack: open a region's descriptor read-write again
// through /proc and write it, by write(2) and through a shared writable
// mapping. It returns nil when either succeeded.
func reopenWrite(path string) error {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err // refused at open: fine too
	}
	defer unix.Close(fd)
	_, werr := unix.Pwrite(fd, []byte("X"), 0)
	m, merr := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if merr == nil {
		unix.Munmap(m)
	}
	if werr == nil || merr == nil {
		return nil
	}
	return fmt.Errorf("write: %v; map writable: %v", werr, merr)
}

// TestReadOnlyRegionCannotBeReopenedWritable: a remote-read region, shared
// with a peer over shm without a cluster secret (open mode), cannot be
// written by a process of the same user that reopens its descriptor
// read-write through /proc/self/fd or /proc/PID/fd: the memfd is sealed
// against writes. The application still writes it, the peer reads what it
// wrote, and after kill -9 of both of the engine's plugins the restarted
// ones still read into it and serve it.
func TestReadOnlyRegionCannotBeReopenedWritable(t *testing.T) {
	ctx := context.Background()
	const size = 1 << 20
	a := newEngine(t, "ro-a")
	b, err := host.New(ctx, joinConfig("ro-b", a.MetastoreURL()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })

	// A page-aligned part of an allocation, remote-read.
	mem, err := a.Allocate(2 * size)
	if err != nil {
		t.Fatal(err)
	}
	ro := mem[:size]
	copy(ro, pattern(size, 0, 1))
	roBase, err := a.Register(ctx, ro, host.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	// b: a buffer to read a's region into, and one a reads from.
	bmem, err := b.Allocate(2 * size)
	if err != nil {
		t.Fatal(err)
	}
	into, src := bmem[:size], bmem[size:]
	if _, err := b.Register(ctx, into, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	srcBase, err := b.Register(ctx, src, host.RemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	aSeg, err := b.OpenSegment(ctx, "ro-a")
	if err != nil {
		t.Fatal(err)
	}
	bSeg, err := a.OpenSegment(ctx, "ro-b")
	if err != nil {
		t.Fatal(err)
	}
	readRO := func(what string, seed uint64) {
		t.Helper()
		clear(into)
		// A restarted plugin has a new endpoint, which the peer learns
		// from the metastore's watch: until then its reads may fail.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := b.Transfer(ctx, host.Request{Op: host.Read, Local: into, Segment: aSeg.ID, Remote: roBase, Transport: "shm"})
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the peer reads the region over shm: %v", what, err)
			}
			time.Sleep(10 * time.Millisecond) // a poll, as waitPlugin's
		}
		if !bytes.Equal(into, pattern(size, 0, seed)) {
			t.Fatalf("%s: the peer read other bytes than the region holds", what)
		}
	}
	readRO("shared", 1)

	// The attack, on every descriptor of the region: this process's own
	// (/proc/self/fd) and each plugin's of either engine (/proc/PID/fd).
	paths := regionFiles(t, os.Getpid(), "ro-a")
	for _, e := range []*host.Engine{a, b} {
		for _, p := range e.Status(ctx).Plugins {
			if p.PID != 0 {
				paths = append(paths, regionFiles(t, p.PID, "ro-a")...)
			}
		}
	}
	if len(paths) == 0 {
		t.Fatal("no descriptor of the region's memfd found")
	}
	for _, p := range paths {
		if err := reopenWrite(p); err == nil {
			t.Errorf("%s: reopened read-write and written", p)
		} else if !errors.Is(err, syscall.EPERM) && !strings.Contains(err.Error(), "operation not permitted") {
			t.Errorf("%s: refused with %v, want EPERM (sealed)", p, err)
		}
	}
	if !bytes.Equal(ro, pattern(size, 0, 1)) {
		t.Fatal("the region's bytes changed")
	}

	// The application writes its memory as ever; the peer reads it.
	copy(ro, pattern(size, 0, 2))
	readRO("written by the application", 2)

	// Reads into the region, written by each plugin through this
	// process; then again by restarted plugins.
	copy(src, pattern(size, 0, 3))
	readInto := func(what string, seed uint64) {
		t.Helper()
		for _, tr := range []string{"shm", "tcp"} {
			clear(ro)
			if err := a.Transfer(ctx, host.Request{Op: host.Read, Local: ro, Segment: bSeg.ID, Remote: srcBase, Transport: tr}); err != nil {
				t.Fatalf("%s: read into the region over %s: %v", what, tr, err)
			}
			if !bytes.Equal(ro, pattern(size, 0, seed)) {
				t.Fatalf("%s: read into the region over %s: bytes differ", what, tr)
			}
		}
	}
	readInto("before a restart", 3)
	for _, name := range []string{"shm", "tcp"} {
		st := pluginStatus(a, name)
		if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitBack(t, a, name, st.Restarts)
	}
	copy(src, pattern(size, 0, 4))
	readInto("after kill -9 of both plugins", 4)
	readRO("served by the restarted shm plugin", 4)
}
