package main_test

import (
	"bufio"
	"encoding/json"
	pngpkg "image/png"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

// TestBadLogFlags: a log level or format that does not exist is an error
// that names the flag and the choices, and nothing starts.
func TestBadLogFlags(t *testing.T) {
	for _, c := range []struct{ flag, value, want string }{
		{"--log-level", "loud", `--log-level "loud": want trace, debug, info, warn, error or off`},
		{"--log-format", "xml", `--log-format "xml": want text or json`},
	} {
		out, err := exec.Command(filepath.Join(binDir, "ferry"), "run", "--name", "bad-log", c.flag, c.value).CombinedOutput()
		if err == nil {
			t.Errorf("ferry run %s %s succeeded", c.flag, c.value)
		}
		if !strings.Contains(string(out), c.want) {
			t.Errorf("ferry run %s %s said %q, want %q", c.flag, c.value, out, c.want)
		}
	}
}

// TestVersion: --version names the plugin protocol versions of the host
// and of the SDK.
func TestVersion(t *testing.T) {
	if out := ferry(t, "--version"); !strings.HasPrefix(out, "ferry ") || !strings.Contains(out, "plugin protocols: host [1 2], sdk [1 2]") {
		t.Errorf("ferry --version said %q", out)
	}
	var v struct {
		Go            string `json:"go"`
		HostProtocols []int  `json:"host_protocols"`
		SDKProtocols  []int  `json:"sdk_protocols"`
	}
	if err := json.Unmarshal([]byte(ferry(t, "version", "--json")), &v); err != nil || v.Go == "" || len(v.HostProtocols) == 0 || len(v.SDKProtocols) == 0 {
		t.Errorf("ferry version --json: %+v, %v", v, err)
	}
}

// TestSIGTERMShutdownIsClean: SIGTERM sent to the engine's whole process
// group, as a terminal or a service manager sends it, stops the engine
// with exit status 0 and no ERROR line; at --log-level debug the plugins
// log at debug too, with durations and whole numbers written as such.
func TestSIGTERMShutdownIsClean(t *testing.T) {
	cmd := exec.Command(filepath.Join(binDir, "ferry"), "run", "--name", "sigterm", "--log-level", "debug")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var logs plugintest.LogBuffer
	cmd.Stderr = &logs
	_, out := plugintest.StartPiped(t, cmd)
	if !bufio.NewScanner(out).Scan() {
		t.Fatalf("ferry run exited before its ready line:\n%s", logs.String())
	}
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("ferry run after SIGTERM: %v", err)
	}
	log := logs.String()
	if strings.Contains(log, "[ERROR]") {
		t.Errorf("shutdown logged an ERROR line:\n%s", log)
	}
	for _, want := range []string{"[DEBUG] ferry.sigterm.tcp.ferry-plugin-tcp:", "handshake_timeout=5s", "max_frame=67108864"} {
		if !strings.Contains(log, want) {
			t.Errorf("engine log lacks %q:\n%s", want, log)
		}
	}
}

// TestPluginsConfigChecksumMismatch: `ferry plugins --config` with a
// pinned sha256 that the binary does not match prints the mismatch and
// exits non-zero; the plugin that matches is still listed.
func TestPluginsConfigChecksumMismatch(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "engine.hcl")
	body := "name = \"pinned\"\nplugin_dir = \"" + binDir + "\"\n" +
		"plugin \"tcp\" {\n  sha256 = \"" + strings.Repeat("ab", 32) + "\"\n}\nplugin \"shm\" {}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(binDir, "ferry"), "plugins", "--config", cfg).CombinedOutput()
	if err == nil {
		t.Errorf("ferry plugins --config with a wrong sha256 exited 0:\n%s", out)
	}
	for _, want := range []string{"FAILED: ", "checksum mismatch", "1 of 2 plugins cannot be started (tcp)", "shm"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ferry plugins said %q, want %q in it", out, want)
		}
	}
}

// TestStatusAndTop: `ferry status` shows a running engine's plugins and
// segments on one screen and as JSON; `ferry top` redraws it.
func TestStatusAndTop(t *testing.T) {
	_, sc := startRun(t, "--name", "status-a")
	control := controlAddr(t, sc)
	out := ferry(t, "status", "--engine", control)
	for _, want := range []string{"engine status-a", "control " + control, "PLUGIN", "tcp", "shm", "running", "0 open segments", "0 failed attempts since start"} {
		if !strings.Contains(out, want) {
			t.Errorf("ferry status lacks %q:\n%s", want, out)
		}
	}
	var st struct {
		Format  int    `json:"format"`
		Name    string `json:"name"`
		Plugins []struct {
			Name, State string
		} `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(ferry(t, "status", "--engine", control, "--json")), &st); err != nil || st.Format != 2 || st.Name != "status-a" || len(st.Plugins) != 2 {
		t.Errorf("ferry status --json: %+v, %v", st, err)
	}
	top := ferry(t, "top", "--engine", control, "--count", "2", "--interval", "50ms")
	if n := strings.Count(top, "engine status-a"); n != 2 {
		t.Errorf("ferry top --count 2 drew %d screens:\n%s", n, top)
	}
}

// TestBenchSweepPlot: a sweep measures each size, verified, writes one
// JSON line a size, and draws a PNG of both series.
func TestBenchSweepPlot(t *testing.T) {
	dir := t.TempDir()
	png, jsonl := filepath.Join(dir, "sweep.png"), filepath.Join(dir, "sweep.jsonl")
	cmd := exec.Command(filepath.Join(binDir, "ferry"), "bench", "--transport", "shm", "--sweep", "4KiB,64KiB", "--batch", "2", "--duration", "100ms", "--warmup", "20ms",
		"--plot", png, "--jsonl", jsonl)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	out := string(b)
	if err != nil {
		t.Fatalf("bench --sweep: %v\n%s%s", err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "TRANSPORT") || strings.Count(out, "shm ") != 2 {
		t.Errorf("sweep table: want one header and two rows:\n%s", out)
	}
	for _, l := range lines[1:] {
		if i := strings.Index(lines[0], "GB/s"); len(l) <= i || l[i-1] != ' ' || l[i] == ' ' {
			t.Errorf("sweep row %q does not line up with the header %q", l, lines[0])
		}
	}
	// Not a terminal: one progress line a size, in order, with its figures.
	p4, p64 := strings.Index(stderr.String(), "ferry bench [1/2] 4KiB: shm write"), strings.Index(stderr.String(), "ferry bench [2/2] 64KiB: shm write")
	if p4 < 0 || p64 < p4 || strings.Count(stderr.String(), "verified (") != 2 {
		t.Errorf("bench --sweep's stderr: want a line for each size as it ends:\n%s", stderr.String())
	}
	b, err = os.ReadFile(jsonl)
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 {
		t.Fatalf("--jsonl has %d lines, want 2:\n%s", len(lines), b)
	}
	for i, want := range []int64{4096, 65536} {
		var r struct {
			BlockSize    int64   `json:"block_size"`
			Verified     bool    `json:"verified"`
			Gbps         float64 `json:"gbps"`
			BaselineGbps float64 `json:"baseline_gbps"`
		}
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil || r.BlockSize != want || !r.Verified || r.Gbps <= 0 || r.BaselineGbps <= 0 {
			t.Errorf("row %d: %+v, %v; want block %d, verified, both measured", i, r, err, want)
		}
	}
	f, err := os.Open(png)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := pngpkg.Decode(f)
	if err != nil {
		t.Fatalf("--plot wrote no PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 400 || b.Dy() < 400 {
		t.Errorf("plot is %v: too small to read", b)
	}
}

// TestRunPrintsMetricsAddress: with a metrics block, the ready line names
// the address /metrics is served on, and it serves Ferry's series.
func TestRunPrintsMetricsAddress(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "engine.hcl")
	body := "name = \"metrics-run\"\nplugin_dir = \"" + binDir + "\"\nplugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\nmetrics {\n  listen = \"127.0.0.1:0\"\n}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	_, sc := startRun(t, "--config", cfg)
	var ready struct {
		Metrics string `json:"metrics"`
	}
	readReady(t, sc, &ready)
	if ready.Metrics == "" {
		t.Fatalf("ready line %q names no metrics address", sc.Text())
	}
	resp, err := http.Get("http://" + ready.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(b), `ferry_plugin_up{engine="metrics-run",plugin="tcp"} 1`) {
		t.Errorf("/metrics at %s lacks the tcp plugin's up series:\n%.2000s", ready.Metrics, b)
	}
}

// TestPluginsConfigChecksSettings: `ferry plugins --config` has each
// plugin decode its block's settings, starting nothing: a bad one fails
// with the plugin's own error at its file:line, and exits 1.
func TestPluginsConfigChecksSettings(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "engine.hcl")
	body := "name = \"settings\"\nplugin_dir = \"" + binDir + "\"\nplugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n    max_frame = \"lots\"\n  }\n}\nplugin \"shm\" {}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(binDir, "ferry"), "plugins", "--config", cfg).CombinedOutput()
	if err == nil {
		t.Errorf("ferry plugins --config with a bad tcp setting exited 0:\n%s", out)
	}
	for _, want := range []string{"FAILED: its settings are refused", "engine.hcl:6:", "max_frame", "1 of 2 plugins cannot be started (tcp)", "settings ok"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("ferry plugins said %q, want %q in it", out, want)
		}
	}
}

// TestPluginsConfigStartsWithoutChecker: a plugin that reads its settings
// only in Start (no sdk.ConfigChecker) is started with its block, so its
// error still shows, at file:line:col; a good block is reported taken.
// Device blocks are started with theirs too.
func TestPluginsConfigStartsWithoutChecker(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		wantErr    bool
		want       []string
	}{
		{"good", "plugin \"nocheck\" {\n  config {\n    depth = 4\n  }\n}\n", false,
			[]string{"nocheck", "available, settings ok"}},
		{"bad", "plugin \"nocheck\" {\n  config {\n    depth = 4\n    width = 2\n  }\n}\n", true,
			[]string{"FAILED: its settings are refused", "engine.hcl:6:5", "width", "1 of 1 plugins cannot be started (nocheck)"}},
		{"device", "plugin \"nocheck\" {}\ndevice \"simdev\" {\n  config {\n    devices = \"two\"\n  }\n}\n", true,
			[]string{"DEVICE PLUGIN", "simdev", "FAILED: ", "engine.hcl:6:15", "devices: want a whole number like 2", "1 of 2 plugins cannot be started (simdev)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := filepath.Join(t.TempDir(), "engine.hcl")
			if err := os.WriteFile(cfg, []byte("name = \"nocheck\"\nplugin_dir = \""+binDir+"\"\n"+tc.body), 0o600); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(filepath.Join(binDir, "ferry"), "plugins", "--config", cfg).CombinedOutput()
			if (err != nil) != tc.wantErr {
				t.Errorf("ferry plugins --config: %v, want an error %v:\n%s", err, tc.wantErr, out)
			}
			for _, want := range tc.want {
				if !strings.Contains(string(out), want) {
					t.Errorf("ferry plugins said %q, want %q in it", out, want)
				}
			}
		})
	}
}
