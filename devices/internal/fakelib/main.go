package fakelib

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

// Setup is what a GPU device plugin's tests run on: a FAKE vendor library
// (Lib, the file name it is loaded by, built from LibSrc), an exporter
// program over it (built from ExporterSrc and LibSrc) and the plugin's
// binary (Plugin, a plugintest.Binaries name).
type Setup struct {
	Name                string // for messages and the temporary directory: "cuda"
	Lib                 string // "libcuda.so.1"
	LibSrc, ExporterSrc string // "testdata/fakecuda.c", "testdata/fakecuda_export.c"
	Plugin              string // "ferry-device-cuda"
	// Leak are goleak's options for the check after the tests.
	Leak []goleak.Option
}

// Built are the paths Main built.
type Built struct{ Lib, Exporter, Plugin string }

// Main is a device package's TestMain: it builds what s names into a
// temporary directory, hands the paths to built, runs the tests, checks
// that no goroutine leaked, removes what it built and exits. A build that
// fails fails the package: its tests do not skip.
func Main(m *testing.M, s Setup, built func(Built)) {
	var b Built
	dir, err := os.MkdirTemp("", "ferry-fake"+s.Name+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b.Lib, b.Exporter = filepath.Join(dir, s.Lib), filepath.Join(dir, "fake"+s.Name+"-export")
	err = errors.Join(Build(b.Lib, true, s.LibSrc), Build(b.Exporter, false, s.ExporterSrc, s.LibSrc))
	bin := ""
	if err == nil {
		bin, err = plugintest.BuildBinaries(map[string]string{plugintest.Binaries[s.Plugin]: s.Plugin})
		b.Plugin = filepath.Join(bin, s.Plugin)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s tests: %v\n", s.Name, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	built(b)
	code := 0
	func() {
		defer os.RemoveAll(dir)
		defer os.RemoveAll(bin)
		defer func() {
			if err := goleak.Find(s.Leak...); err != nil {
				fmt.Fprintln(os.Stderr, "goleak:", err)
				code = 1
			}
		}()
		code = m.Run()
	}()
	os.Exit(code)
}

// HostMem maps n bytes as the SDK maps a host region (MAP_SHARED),
// unmapped when the test ends.
func HostMem(t *testing.T, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// Pattern returns n bytes that depend on seed and on each byte's offset.
func Pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)*7 + seed
	}
	return b
}

// Exporter is a FAKE library's exporter program (testdata/fake*_export.c)
// running: it allocated device memory in its own process and printed its
// IPC handle, and frees it when told (Free).
type Exporter struct {
	// Handle is the IPC handle it printed (64 bytes).
	Handle []byte
	in     io.WriteCloser
	lines  *bufio.Scanner
}

// StartExporter runs the exporter at path over size bytes and reads its
// handle; the process is ended when the test ends.
func StartExporter(t *testing.T, path string, size int) *Exporter {
	t.Helper()
	cmd := exec.Command(path, fmt.Sprint(size))
	cmd.Stderr = os.Stderr
	in, out := plugintest.StartPiped(t, cmd)
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	x := &Exporter{in: in, lines: bufio.NewScanner(out)}
	if !x.lines.Scan() {
		t.Fatalf("exporter printed no handle: %v", x.lines.Err())
	}
	data, err := hex.DecodeString(x.lines.Text())
	if err != nil || len(data) != 64 {
		t.Fatalf("exporter's handle %q: %v", x.lines.Text(), err)
	}
	x.Handle = data
	return x
}

// Free has the exporter free its memory, and waits until it has.
func (x *Exporter) Free(t *testing.T) {
	t.Helper()
	fmt.Fprintln(x.in, "free")
	if !x.lines.Scan() || x.lines.Text() != "freed" {
		t.Fatalf("exporter did not free: %q %v", x.lines.Text(), x.lines.Err())
	}
}
