package plugintest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

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
