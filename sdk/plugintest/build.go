package plugintest

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"
)

// Binaries maps the name of each binary this repository ships (the CLI and
// its plugins) to the Go package it is built from; Main builds the ones a
// test package names. A test's own fixtures go in Main.Extra.
var Binaries = map[string]string{
	"ferry":               "github.com/ferrydev/ferry/cmd/ferry",
	"ferry-plugin-shm":    "github.com/ferrydev/ferry/plugins/shm/cmd/ferry-plugin-shm",
	"ferry-plugin-tcp":    "github.com/ferrydev/ferry/plugins/tcp/cmd/ferry-plugin-tcp",
	"ferry-plugin-fault":  "github.com/ferrydev/ferry/plugins/fault/cmd/ferry-plugin-fault",
	"ferry-device-simdev": "github.com/ferrydev/ferry/plugins/simdev/cmd/ferry-device-simdev",
	"ferry-plugin-nvlink": "github.com/ferrydev/ferry/plugins/nvlink/cmd/ferry-plugin-nvlink",
	"ferry-device-cuda":   "github.com/ferrydev/ferry/devices/cuda/cmd/ferry-device-cuda",
	"ferry-device-rocm":   "github.com/ferrydev/ferry/devices/rocm/cmd/ferry-device-rocm",
}

// IgnoreLogStderr is the goleak option for go-plugin's stderr reader, which
// outlives a killed plugin process by a moment.
var IgnoreLogStderr = goleak.IgnoreTopFunction("github.com/hashicorp/go-plugin.(*Client).logStderr")

// Main is a TestMain for tests that start this repository's binaries.
type Main struct {
	// Binaries are the names (keys of Binaries) to build, once, before the
	// tests run.
	Binaries []string
	// Extra are more binaries to build beside them: name -> Go package,
	// for fixtures that live with the tests that use them.
	Extra map[string]string
	// CheckLeaks fails a passing run that leaves goroutines running, except
	// those IgnoreLeaks names.
	CheckLeaks  bool
	IgnoreLeaks []goleak.Option
}

// Run builds the binaries into a new temporary directory, hands it to use,
// runs the tests, removes the directory and, when asked, checks for leaked
// goroutines. It returns the code for os.Exit; a build that fails is
// printed and exits 1 without running any test.
func (c Main) Run(m *testing.M, use func(dir string)) int {
	pkgs := make(map[string]string, len(c.Binaries)+len(c.Extra))
	for name, pkg := range c.Extra {
		pkgs[pkg] = name
	}
	for _, name := range c.Binaries {
		pkg, ok := Binaries[name]
		if !ok {
			fmt.Fprintf(os.Stderr, "plugintest.Main: no binary %q in plugintest.Binaries; add its package there\n", name)
			return 1
		}
		pkgs[pkg] = name
	}
	dir, err := BuildBinaries(pkgs)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	use(dir)
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 && c.CheckLeaks {
		if err := goleak.Find(c.IgnoreLeaks...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// BuildBinaries builds each Go package of pkgs (package path -> binary
// name) into a new temporary directory and returns it; the caller removes
// it. Tests that start plugin or engine processes call it once from
// TestMain, so every test runs the real binaries.
func BuildBinaries(pkgs map[string]string) (string, error) {
	dir, err := os.MkdirTemp("", "ferry-bin-")
	if err != nil {
		return "", err
	}
	for pkg, name := range pkgs {
		if err := build(pkg, filepath.Join(dir, name)); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	return dir, nil
}

// StartPiped starts cmd with a pipe to its stdin and one from its stdout,
// and returns them; it fails the test if it cannot. The caller waits for
// cmd, after closing stdin if the process reads it to the end.
func StartPiped(t testing.TB, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatalf("stdin pipe of %s: %v", cmd.Path, err)
	}
	stdout, err = cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("stdout pipe of %s: %v", cmd.Path, err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	return stdin, stdout
}

// BuildPlugin builds the plugin package pkg into the test's temporary
// directory and returns the binary's path, for Run.
func BuildPlugin(t testing.TB, pkg string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	if err := build(pkg, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

func build(pkg, out string) error {
	cmd := exec.Command("go", "build", "-o", out, pkg)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", pkg, err, log.String())
	}
	return nil
}
