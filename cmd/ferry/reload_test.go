package main_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRunReloadUpgradesOnHUP: `ferry run --config f` upgrades a plugin
// live when f's plugin block names another binary and SIGHUP comes; a
// block whose sha256 does not match leaves the running binary serving,
// and says why.
func TestRunReloadUpgradesOnHUP(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "run.hcl")
	extra := "" // more of tcp's config block
	write := func(path, sum string) {
		t.Helper()
		pin := ""
		if path != "" {
			pin = fmt.Sprintf("  path = %q\n  sha256 = %q\n", path, sum)
		}
		src := fmt.Sprintf("name = \"hup-a\"\nplugin_dir = %q\nplugin \"tcp\" {\n%s  config {\n    listen = [\"127.0.0.1:0\"]\n%s  }\n}\n", binDir, pin, extra)
		if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("", "")
	bin, err := os.ReadFile(filepath.Join(binDir, "ferry-plugin-tcp"))
	if err != nil {
		t.Fatal(err)
	}
	v2 := filepath.Join(dir, "ferry-plugin-tcp-v2")
	if err := os.WriteFile(v2, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(bin)
	sum := hex.EncodeToString(s[:])

	cmd := exec.Command(filepath.Join(binDir, "ferry"), "run", "--control-stdin", "--config", file)
	logs, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, out := startPipedRun(t, cmd)
	reloads := make(chan string, 8)
	go func() {
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			if _, line, ok := strings.Cut(sc.Text(), "ferry run: reload: "); ok {
				reloads <- line
			}
		}
		close(reloads)
	}()
	sc := bufio.NewScanner(out)
	var ready struct {
		Plugins []pluginState `json:"plugins"`
	}
	readReady(t, sc, &ready)
	tcpPID := func() int {
		t.Helper()
		fmt.Fprintln(in, "plugins")
		if !sc.Scan() {
			t.Fatal("ferry run exited without answering `plugins`")
		}
		var ps []pluginState
		if err := json.Unmarshal(sc.Bytes(), &ps); err != nil {
			t.Fatalf("`plugins` answered %q: %v", sc.Text(), err)
		}
		for _, p := range ps {
			if p.Name == "tcp" && p.State == "running" {
				return p.PID
			}
		}
		t.Fatalf("no running tcp in %q", sc.Text())
		return 0
	}
	old := tcpPID()
	var lastReload string
	hup := func(want string) {
		t.Helper()
		if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		line, ok := <-reloads
		lastReload = line
		if !ok || !strings.Contains(line, want) {
			t.Fatalf("after SIGHUP the engine logged %q, want %q", line, want)
		}
		t.Logf("reload: %s", line)
	}

	write(v2, "00"+sum[2:])
	hup(`plugin "tcp" not upgraded (the old binary still serves`)
	if pid := tcpPID(); pid != old {
		t.Fatalf("a refused upgrade changed tcp's process from %d to %d", old, pid)
	}
	write(v2, sum)
	hup(`plugin "tcp" upgraded to ` + v2)
	upgraded := tcpPID()
	if upgraded == old || upgraded == 0 {
		t.Fatalf("tcp's process after the upgrade: %d (was %d)", upgraded, old)
	}

	// The plugin's own config block changed, the binary not: a bad
	// value is refused where the file says it (line 8 of run.hcl), and
	// the running process serves on; a good one restarts it live.
	extra = "    io_timeout = \"forever\"\n"
	write(v2, sum)
	hup(`plugin "tcp" not upgraded (the old binary still serves, with its config)`)
	if line := lastReload; !strings.Contains(line, "run.hcl:8:") || !strings.Contains(line, "io_timeout") {
		t.Fatalf("the refused config's error %q does not name run.hcl:8 and io_timeout", line)
	}
	if pid := tcpPID(); pid != upgraded {
		t.Fatalf("a refused config block changed tcp's process from %d to %d", upgraded, pid)
	}
	extra = "    io_timeout = \"45s\"\n"
	write(v2, sum)
	hup(`plugin "tcp" restarted live with its new config block`)
	if pid := tcpPID(); pid == upgraded || pid == 0 {
		t.Fatalf("tcp's process after its config block changed: %d (was %d)", pid, upgraded)
	}
	before := tcpPID()
	// Both changed: back to the plugin directory's binary, and the
	// config block as it first was.
	extra = ""
	write("", "")
	hup(`plugin "tcp" upgraded to ` + filepath.Join(binDir, "ferry-plugin-tcp") + ` with its new config block`)
	if pid := tcpPID(); pid == before {
		t.Fatalf("tcp's process did not change on the last reload (%d)", pid)
	}
}

// startPipedRun starts cmd with piped stdin and stdout, and closes its
// stdin and waits for it when the test ends.
func startPipedRun(t *testing.T, cmd *exec.Cmd) (stdin interface {
	Write([]byte) (int, error)
	Close() error
}, stdout interface{ Read([]byte) (int, error) }) {
	t.Helper()
	w, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	r, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Close()
		cmd.Wait()
	})
	return w, r
}
