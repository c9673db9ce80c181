package supervisor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/host/loader"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

func TestMain(m *testing.M) {
	build := plugintest.Main{
		Binaries:    []string{"ferry-plugin-tcp"},
		CheckLeaks:  true,
		IgnoreLeaks: []goleak.Option{plugintest.IgnoreLogStderr},
	}
	os.Exit(build.Run(m, func(dir string) { tcpBin = filepath.Join(dir, "ferry-plugin-tcp") }))
}

// TestStartRefused: a plugin whose binary is missing is kept Failed with
// the loader's reason; the set still stops and closes cleanly.
func TestStartRefused(t *testing.T) {
	s := New(Config{})
	ch := s.Changed()
	path := filepath.Join(t.TempDir(), "ferry-plugin-nope")
	ups := 0
	p := s.Start(t.Context(), Spec{Loader: loader.Spec{Name: "nope", Path: path}}, Hooks{Up: func(*Run) { ups++ }})
	if p.State() != Failed || p.Down() || p.Run() != nil || ups != 0 {
		t.Fatalf("state %v down %v run %v ups %d; want Failed, not down, no run, no Up", p.State(), p.Down(), p.Run(), ups)
	}
	if !errors.Is(p.Err(), loader.ErrPlugin) || !strings.Contains(p.Err().Error(), "binary not found") {
		t.Fatalf("Err = %v; want a loader error saying the binary is not found", p.Err())
	}
	select {
	case <-ch:
	default:
		t.Fatal("Changed not closed when the plugin failed")
	}
	st := p.Status(t.Context())
	if st.State != "failed" || st.Reason != p.Err().Error() || st.PID != 0 {
		t.Fatalf("status %+v; want failed with Err as reason", st)
	}
	if got := s.Plugins(); len(got) != 1 || got[0] != p || p.Index() != 0 || p.Name() != "nope" {
		t.Fatalf("Plugins() = %v, index %d, name %q", got, p.Index(), p.Name())
	}
	s.Stop(t.Context())
	s.Close()
}

// TestCommitAfterQuit: once the set quits, no run becomes current, so
// that Close sees every run there will be.
func TestCommitAfterQuit(t *testing.T) {
	s := New(Config{})
	p := &Plugin{set: s, name: "tcp"}
	p.state.Store(uint32(Restarting))
	s.Quit()
	s.Quit() // twice is fine
	up := false
	p.hooks.Up = func(*Run) { up = true }
	if s.commit(p, &Run{}, &Run{}) {
		t.Fatal("commit after Quit succeeded")
	}
	if up || p.Run() != nil || p.State() != Restarting || p.Restarts() != 0 {
		t.Fatalf("a refused commit changed the plugin: up %v run %v state %v restarts %d", up, p.Run(), p.State(), p.Restarts())
	}
	s.Close()
}
