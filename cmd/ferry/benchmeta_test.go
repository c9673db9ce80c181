package main_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

// TestBenchTargetEveryMetastore: bench --target finds an engine that
// publishes to Redis or etcd (real servers on loopback ports) through
// the initiator config's own metastore block, through --metastore
// redis:// or etcd:// with the built-in config, and through --metastore
// over a config whose block is of another kind, whose lines it does not
// blame; each run verifies the far buffer. Without either, it says why
// before it starts an engine.
func TestBenchTargetEveryMetastore(t *testing.T) {
	redis, etcd := metastoretest.NewRedis(t), metastoretest.NewEtcd(t)
	blocks := map[string]string{
		"redis": "metastore {\n  kind    = \"redis\"\n  address = \"" + redis.Addr + "\"\n}\n",
		"etcd":  "metastore {\n  kind      = \"etcd\"\n  endpoints = [\"" + etcd.EtcdEndpoint() + "\"]\n}\n",
	}
	urls := map[string]string{"redis": "redis://" + redis.Addr, "etcd": "etcd://" + etcd.Addr}
	other := map[string]string{"redis": "etcd", "etcd": "redis"}
	dir := t.TempDir()
	cfg := func(name, kind string) string {
		p := filepath.Join(dir, name+".hcl")
		// The run's cluster secret (plugintest.Main shares it through
		// $FERRY_CLUSTER_SECRET_FILE, which bench's built-in config reads).
		body := "name = \"" + name + "\"\nplugin_dir = \"" + binDir + "\"\n" + fmt.Sprintf("cluster_secret_file = %q\n", os.Getenv(config.SecretFileEnv)) + blocks[kind] + "plugin \"tcp\" {\n  config {\n    listen = [\"127.0.0.1:0\"]\n  }\n}\n"
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const n = 2 * 64 << 10
	for _, kind := range []string{"redis", "etcd"} {
		far := "bench-far-" + kind
		_, sc := startRun(t, "--config", cfg("far-"+kind, kind), "--name", far, "--expose", fmt.Sprint(n))
		var ready struct{ Name string }
		readReady(t, sc, &ready)
		for _, c := range []struct {
			how  string
			args []string
		}{
			{"the config's " + kind + " block", []string{"--config", cfg("near-"+kind, kind)}},
			{"--metastore " + urls[kind], []string{"--metastore", urls[kind]}},
			{"--metastore " + urls[kind] + " over a config of " + other[kind], []string{"--config", cfg("near-"+other[kind], other[kind]), "--metastore", urls[kind]}},
		} {
			args := append([]string{"bench", "--target", far, "--transport", "tcp", "--op", "write", "--size", "64KiB", "--batch", "2",
				"--duration", "200ms", "--warmup", "50ms", "--json"}, c.args...)
			out, err := exec.Command(filepath.Join(binDir, "ferry"), args...).CombinedOutput()
			if err != nil {
				t.Errorf("bench --target over %s: %v\n%s", c.how, err, out)
				continue
			}
			var row struct {
				Verified bool   `json:"verified"`
				Bytes    uint64 `json:"bytes"`
			}
			line := string(out[strings.LastIndex(strings.TrimSpace(string(out)), "\n")+1:])
			if err := json.Unmarshal([]byte(line), &row); err != nil || !row.Verified || row.Bytes == 0 {
				t.Errorf("bench --target over %s: want verified bytes, got %q (%v)\n%s", c.how, line, err, out)
			}
		}
	}

	out, err := exec.Command(filepath.Join(binDir, "ferry"), "bench", "--target", "bench-far-redis").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "metastore is embedded") || !strings.Contains(string(out), "redis://") || strings.Contains(string(out), "[WARN]") {
		t.Errorf("bench --target with the built-in config's embedded metastore: %v, want it refused before an engine starts, naming --metastore's forms:\n%s", err, out)
	}
	out, err = exec.Command(filepath.Join(binDir, "ferry"), "bench", "--target", "bench-far-redis", "--metastore", "redis:/"+redis.Addr).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--metastore: metastore URL") {
		t.Errorf("bench --metastore with a malformed URL: %v, want it named:\n%s", err, out)
	}
}
