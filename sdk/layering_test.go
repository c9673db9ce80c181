package sdk_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestLayering keeps the SDK and the plugins free of the host: a vendor
// builds a plugin from sdk/ alone, and the host's internals can change
// without a plugin release.
func TestLayering(t *testing.T) {
	const mod = "github.com/ferrydev/ferry"
	forbidden := []string{mod + "/host", mod + "/config", mod + "/cmd"}
	forEachImport(t, vendorTrees, func(string) bool { return false }, func(path, p string) {
		for _, bad := range forbidden {
			if p == bad || strings.HasPrefix(p, bad+"/") {
				t.Errorf("%s imports %s: sdk/, plugins/ and devices/ must not depend on the host", path, p)
			}
		}
	})
}

// TestDecidersLayering keeps the host's deciders free of config: they
// take plain facts (an intent from internal/intent, a rail block as
// rails.Block), so that a change to the configuration's shape stays in
// config and in the engine that translates it.
func TestDecidersLayering(t *testing.T) {
	const bad = "github.com/ferrydev/ferry/config"
	deciders := []string{"host/admission", "host/selector", "host/rails", "host/failover", "host/slicer", "host/credit"}
	forEachImport(t, deciders, func(string) bool { return false }, func(path, p string) {
		if p == bad || strings.HasPrefix(p, bad+"/") {
			t.Errorf("%s imports %s: a decider takes plain facts, not the configuration", path, p)
		}
	})
}

// vendorTrees are what a vendor builds a plugin from.
var vendorTrees = []string{"sdk", "plugins", "devices"}

// forEachImport calls fn with the path and every import of every Go file
// under dirs of the repository (a tree that does not exist is skipped)
// but those skip says to pass over, given the file's path from the
// repository root. It fails the test if fewer than ten files were read,
// which means the walk is not rooted where it should be.
func forEachImport(t *testing.T, dirs []string, skip func(rel string) bool, fn func(path, imp string)) {
	t.Helper()
	root := filepath.Join("..")
	checked := 0
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if os.IsNotExist(err) && path == filepath.Join(root, dir) {
					return filepath.SkipDir
				}
				return err
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") {
				return nil
			}
			if rel, _ := filepath.Rel(root, path); skip(filepath.ToSlash(rel)) {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			checked++
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				fn(path, p)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 10 {
		t.Fatalf("checked only %d files: is the walk rooted right?", checked)
	}
}

// TestVendorView keeps host-side code out of what a plugin author imports:
// the host's client and launcher live in internal/pluginclient, which only
// sdk/plugintest (it drives a plugin as a host does) and tests may import
// from sdk/ and plugins/; and package sdk exports none of the names the
// host-side code had before it moved.
func TestVendorView(t *testing.T) {
	const client = "github.com/ferrydev/ferry/internal/pluginclient"
	// Tests, and sdk/plugintest, may drive a plugin as a host does.
	skip := func(rel string) bool {
		return strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "sdk/plugintest/")
	}
	forEachImport(t, vendorTrees, skip, func(path, p string) {
		if p == client {
			t.Errorf("%s imports %s: only sdk/plugintest and tests may; a plugin carries no host code", path, p)
		}
	})

	// The host-only names package sdk exported before they moved.
	hostOnly := map[string]bool{"TransportClient": true, "Launch": true, "Process": true, "PluginSets": true}
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi fs.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg := pkgs["sdk"]
	if pkg == nil {
		t.Fatal("package sdk not found in sdk/")
	}
	for name, f := range pkg.Files {
		for _, decl := range f.Decls {
			switch decl := decl.(type) {
			case *ast.FuncDecl:
				if decl.Recv == nil && hostOnly[decl.Name.Name] {
					t.Errorf("%s: package sdk exports func %s, which only a host uses (it belongs in internal/pluginclient)", name, decl.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range decl.Specs {
					if ts, ok := spec.(*ast.TypeSpec); ok && hostOnly[ts.Name.Name] {
						t.Errorf("%s: package sdk exports type %s, which only a host uses (it belongs in internal/pluginclient)", name, ts.Name.Name)
					}
				}
			}
		}
	}
}
