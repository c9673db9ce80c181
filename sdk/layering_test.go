package sdk_test

import (
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
	root := filepath.Join("..")
	const mod = "github.com/ferrydev/ferry"
	forbidden := []string{mod + "/host", mod + "/config", mod + "/cmd"}
	checked := 0
	for _, dir := range []string{"sdk", "plugins", "devices"} {
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
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			checked++
			for _, imp := range f.Imports {
				p, _ := strconv.Unquote(imp.Path.Value)
				for _, bad := range forbidden {
					if p == bad || strings.HasPrefix(p, bad+"/") {
						t.Errorf("%s imports %s: sdk/, plugins/ and devices/ must not depend on the host", path, p)
					}
				}
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
