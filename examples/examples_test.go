package examples_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/examples"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

func TestMain(m *testing.M) {
	build := plugintest.Main{Binaries: []string{"ferry-plugin-shm", "ferry-plugin-tcp"}}
	// The examples find the plugins as an embedding application does:
	// through $FERRY_PLUGIN_DIR.
	os.Exit(build.Run(m, func(dir string) { os.Setenv("FERRY_PLUGIN_DIR", dir) }))
}

func ExampleMoveBlock() {
	if err := examples.MoveBlock(context.Background()); err != nil {
		panic(err)
	}
	// Output: wrote 4096 bytes from prefill-0 to decode-0, verified
}

// TestReadmeSnippets: every Go block of the README is, line for line
// (leading tabs aside), a part of one of these examples, which compile
// and run above; a snippet that drifts from working code fails here.
func TestReadmeSnippets(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var code strings.Builder
	for _, f := range []string{"embed.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code.Write(b)
	}
	norm := func(s string) string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimLeft(l, "\t"); l != "" {
				out = append(out, l)
			}
		}
		return strings.Join(out, "\n")
	}
	src := norm(code.String())
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	if len(blocks) == 0 {
		t.Fatal("the README has no Go block")
	}
	for _, b := range blocks {
		if !strings.Contains(src, norm(b[1])) {
			t.Errorf("README Go block is not in examples/ verbatim; update one to match the other:\n%s", b[1])
		}
	}
}
