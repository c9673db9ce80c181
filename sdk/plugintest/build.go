package plugintest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
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

// Run builds the binaries into a new temporary directory, shares one
// cluster secret with every engine the tests start (shareSecret), hands
// the directory to use, runs the tests, removes the directory and, when asked, checks for leaked
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
	secret, err := shareSecret()
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	use(dir)
	code := m.Run()
	os.RemoveAll(dir)
	if secret != "" {
		os.RemoveAll(secret)
	}
	if code == 0 && c.CheckLeaks {
		if err := goleak.Find(c.IgnoreLeaks...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	return code
}

// secretFileEnv is config.SecretFileEnv: the file of the cluster secret
// that engines from config.Default use.
const secretFileEnv = "FERRY_CLUSTER_SECRET_FILE"

// shareSecret gives the test process and the engines it starts one
// cluster secret: unless the environment names one, it writes a generated
// secret into a new directory, which it returns for removal, and sets
// FERRY_CLUSTER_SECRET_FILE to it, so that engines from config.Default
// here and in child processes (`ferry run`) can talk to each other.
func shareSecret() (string, error) {
	if os.Getenv(secretFileEnv) != "" {
		return "", nil
	}
	dir, err := os.MkdirTemp("", "ferry-secret-")
	if err != nil {
		return "", err
	}
	var b [32]byte
	rand.Read(b[:])
	file := filepath.Join(dir, "cluster-secret")
	if err := os.WriteFile(file, []byte(hex.EncodeToString(b[:])+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	os.Setenv(secretFileEnv, file)
	return dir, nil
}

// BinariesEnv names an environment variable: a directory holding this
// repository's binaries built from the tree under test. `make test` sets it
// to bin/, which its first stage has just built, so that each test package
// links those instead of building its own. BuildBinaries and BuildPlugin
// take a binary from there when it holds one (hard-linked, or copied, into
// the test's own directory, so that a test may rename or replace it); a
// test's fixtures (Main.Extra) are always built. Without it every binary
// is built, as `go test` alone does.
const BinariesEnv = "FERRY_TEST_BINARIES"

// BuildBinaries builds each Go package of pkgs (package path -> binary
// name) into a new temporary directory and returns it; the caller removes
// it. Tests that start plugin or engine processes call it once from
// TestMain, so every test runs the real binaries. One go command builds
// them all, so their links run in parallel; the ones BinariesEnv's
// directory holds are taken from there.
func BuildBinaries(pkgs map[string]string) (string, error) {
	dir, err := os.MkdirTemp("", "ferry-bin-")
	if err != nil {
		return "", err
	}
	var build []string
	for pkg, name := range pkgs {
		ok, err := prebuilt(pkg, name, filepath.Join(dir, name))
		if err != nil {
			os.RemoveAll(dir)
			return "", err
		}
		if !ok {
			build = append(build, pkg)
		}
	}
	if err := buildAll(build, pkgs, dir); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// buildAll builds pkgs into dir, as the names byPkg gives them.
func buildAll(pkgs []string, byPkg map[string]string, dir string) error {
	if len(pkgs) == 0 {
		return nil
	}
	slices.Sort(pkgs)
	// go build -o dir/ names each binary after its package's directory.
	seen := map[string]bool{}
	var together, apart []string
	for _, pkg := range pkgs {
		base := path.Base(pkg)
		if base == byPkg[pkg] && !seen[base] {
			seen[base] = true
			together = append(together, pkg)
		} else {
			apart = append(apart, pkg)
		}
	}
	if len(together) > 0 {
		if err := goBuild(dir+string(filepath.Separator), together...); err != nil {
			return err
		}
	}
	for _, pkg := range apart {
		if err := goBuild(filepath.Join(dir, byPkg[pkg]), pkg); err != nil {
			return err
		}
	}
	return nil
}

// prebuilt puts BinariesEnv's copy of the binary name at to, when it is
// one of the repository's (Binaries) and the directory holds it.
func prebuilt(pkg, name, to string) (bool, error) {
	from := os.Getenv(BinariesEnv)
	if from == "" || Binaries[name] != pkg {
		return false, nil
	}
	from = filepath.Join(from, name)
	if fi, err := os.Stat(from); err != nil || !fi.Mode().IsRegular() {
		return false, nil
	}
	if os.Link(from, to) == nil {
		return true, nil
	}
	src, err := os.Open(from)
	if err != nil {
		return false, fmt.Errorf("%s=%s: %w", BinariesEnv, os.Getenv(BinariesEnv), err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		return false, err
	}
	_, err = io.Copy(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return false, fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	return true, nil
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
	bin := filepath.Join(t.TempDir(), path.Base(pkg))
	ok, err := prebuilt(pkg, path.Base(pkg), bin)
	if err == nil && !ok {
		err = goBuild(bin, pkg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// goBuild runs go build -o out pkgs.
func goBuild(out string, pkgs ...string) error {
	cmd := exec.Command("go", append([]string{"build", "-o", out}, pkgs...)...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build %s: %w\n%s", strings.Join(pkgs, " "), err, log.String())
	}
	return nil
}
