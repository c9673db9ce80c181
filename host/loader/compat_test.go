package loader

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
)

// protocol1Commit is the last commit whose SDK speaks only protocol
// version 1: a plugin built from it is what a vendor shipped before
// protocol 2.
const protocol1Commit = "1ce3cae"

// oldTreeEnv is the environment of a go command run in an old tree. It
// may fetch modules through the configured proxy: the old commit's
// dependencies are in the cache today, but a later go.mod that upgrades one
// would leave its old version out of a fresh machine's cache.
func oldTreeEnv() []string {
	return append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
}

// buildAtCommit builds the plugin package pkg from the repository as it
// was at commit and returns the binary's path.
func buildAtCommit(t *testing.T, commit, pkg string) string {
	t.Helper()
	src := extract(t, commit)
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg)+"-"+commit)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = src
	build.Env = oldTreeEnv()
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s at commit %s : %v\n%s", pkg, commit, err, out)
	}
	return bin
}

// extract writes the repository's tree at commit into a temporary
// directory and returns it.
func extract(t *testing.T, commit string) string {
	t.Helper()
	if out, err := exec.Command("git", "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		t.Fatalf("commit %s (the SDK of protocol version 1) is not in this clone's history (%v: %s): "+
			"this test builds a protocol-1 plugin from it; in a shallow clone run `git fetch --unshallow`", commit, err, bytes.TrimSpace(out))
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("find the repository's root: %v", err)
	}
	src := t.TempDir()
	// From the root: git archive run in a subdirectory archives only it.
	archive := exec.Command("git", "archive", "--format=tar", commit)
	archive.Dir = string(bytes.TrimSpace(top))
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	var archErr, tarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archErr, &tarErr
	if err := untar.Start(); err != nil {
		t.Fatalf("tar: %v", err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v: %s", commit, err, archErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("tar -x of commit %s: %v: %s", commit, err, tarErr.String())
	}
	return src
}

// A plugin built against protocol version 1 (the SDK as of commit
// 1ce3cae) still works with this host: the handshake settles on version
// 1, its capabilities read as unknown (zero: the host's defaults), the
// optional interfaces it lacks answer a typed error, and the conformance
// suite, driven by this host's client, moves and verifies data through
// it.
func TestProtocol1PluginWorks(t *testing.T) {
	bin := buildAtCommit(t, protocol1Commit, "./plugins/tcp/cmd/ferry-plugin-tcp")

	p, err := Start(context.Background(), Spec{Name: "tcp-v1", Path: bin}, nil)
	if err != nil {
		t.Fatalf("start the protocol-1 plugin: %v", err)
	}
	defer p.Kill()
	if p.Protocol != 1 {
		t.Fatalf("negotiated protocol %d with a protocol-1 plugin, want 1", p.Protocol)
	}
	if p.Info.Name != "tcp" || p.Info.Ops != nil || p.Info.MaxSlice != 0 || p.Info.PreferredSlice != 0 || len(p.Interfaces) != 0 {
		t.Fatalf("protocol-1 plugin described as %+v, interfaces %q: want name tcp and every capability unknown", p.Info, p.Interfaces)
	}
	if !p.Info.Carries(ring.OpWrite) || !p.Info.Carries(ring.OpRead) {
		t.Fatal("unknown ops must read as writes and reads")
	}
	err = p.Client.Drain(context.Background())
	if !errors.Is(err, ErrUnimplemented) {
		t.Fatalf("Drain on a protocol-1 plugin: %v, want ErrUnimplemented", err)
	}
	if !strings.Contains(err.Error(), `plugin "tcp" does not implement Drain; needs SDK >= protocol 2`) {
		t.Errorf("Drain's error %q does not say what is missing", err)
	}
	p.Kill()

	plugintest.Run(t, plugintest.Config{
		Binary:     bin,
		ConfigA:    []byte(`listen = ["127.0.0.1:0"]`),
		ConfigB:    []byte(`listen = ["127.0.0.1:0"]`),
		RegionSize: 4 << 20,
	})
}

// The other direction: a host built for protocol 1 (the SDK's conformance
// suite as of commit 1ce3cae, whose client and launcher are that host's)
// drives a plugin built with this SDK, which serves version 1 to it, and
// moves and verifies data through it.
func TestProtocol1HostDrivesThisPlugin(t *testing.T) {
	src := extract(t, protocol1Commit)
	const test = `package plugintest_test

import (
	"os"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

func TestThisPlugin(t *testing.T) {
	plugintest.Run(t, plugintest.Config{
		Binary:     os.Getenv("FERRY_PLUGIN_UNDER_TEST"),
		ConfigA:    []byte(` + "`" + `listen = ["127.0.0.1:0"]` + "`" + `),
		ConfigB:    []byte(` + "`" + `listen = ["127.0.0.1:0"]` + "`" + `),
		RegionSize: 4 << 20,
	})
}
`
	if err := os.WriteFile(filepath.Join(src, "sdk", "plugintest", "thisplugin_test.go"), []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	run := exec.Command("go", "test", "-count=1", "-run", "^TestThisPlugin$", "-v", "./sdk/plugintest/")
	run.Dir = src
	run.Env = append(oldTreeEnv(), "FERRY_PLUGIN_UNDER_TEST="+filepath.Join(binDir, "ferry-plugin-tcp"))
	out, err := run.CombinedOutput()
	if err != nil {
		t.Fatalf("the protocol-1 conformance suite against this SDK's tcp plugin: %v\n%s", err, out)
	}
	// It ran, rather than skipped or matched nothing.
	for _, w := range []string{"--- PASS: TestThisPlugin/RoundTrips", "--- PASS: TestThisPlugin/Rejections"} {
		if !strings.Contains(string(out), w) {
			t.Fatalf("the protocol-1 suite's output lacks %q:\n%s", w, out)
		}
	}
}
