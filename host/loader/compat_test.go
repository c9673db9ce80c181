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

// buildAtCommit builds the plugin package pkg from the repository as it
// was at commit, with the module cache only (GOPROXY=off: nothing is
// fetched), and returns the binary's path.
func buildAtCommit(t *testing.T, commit, pkg string) string {
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
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg)+"-"+commit)
	build := exec.Command("go", "build", "-o", bin, pkg)
	build.Dir = src
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=mod", "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build %s at commit %s (GOPROXY=off: every dependency must be in the module cache): %v\n%s", pkg, commit, err, out)
	}
	return bin
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
