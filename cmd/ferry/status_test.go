package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/metastore/metastoretest"
)

// TestStatusByName: status, top and plugins --engine take an engine's
// name as well as its control address, and find it in the metastore of
// --config (Redis here; an embedded one at a fixed port, served by the
// engine, with a cluster secret that its descriptor is checked against)
// or of --metastore. A name nobody publishes, and a name with nothing to
// look it up in, fail saying what to give.
func TestStatusByName(t *testing.T) {
	redis := metastoretest.NewRedis(t)
	dir := t.TempDir()
	write := func(name, body string) string { return writeTestFile(t, dir, name, body) }
	secret := write("secret", "status-by-name-cluster-secret-0123456789\n")
	// status-r has the run's secret (plugintest.Main's
	// $FERRY_CLUSTER_SECRET_FILE), which a --metastore lookup reads too.
	cfgR := write("r.hcl", fmt.Sprintf("name = \"status-r\"\nplugin_dir = %q\ncluster_secret_file = %q\nmetastore {\n  kind    = \"redis\"\n  address = %q\n}\nplugin \"tcp\" {}\n",
		binDir, os.Getenv(config.SecretFileEnv), redis.Addr))
	cfgE := write("e.hcl", fmt.Sprintf("name = \"status-e\"\nplugin_dir = %q\ncluster_secret_file = %q\nmetastore {\n  kind   = \"embedded\"\n  listen = \"127.0.0.1:%s\"\n}\nplugin \"tcp\" {}\n",
		binDir, secret, freePort(t)))
	_, scR := startRun(t, "--config", cfgR)
	controlR := controlAddr(t, scR)
	_, scE := startRun(t, "--config", cfgE)
	controlE := controlAddr(t, scE)

	run := func(args ...string) (string, error) {
		out, err := exec.Command(filepath.Join(binDir, "ferry"), args...).CombinedOutput()
		return string(out), err
	}
	for _, c := range []struct {
		args    []string
		control string
	}{
		{[]string{"status", "--engine", "status-r", "--config", cfgR}, controlR},
		{[]string{"status", "--engine", "status-r", "--metastore", "redis://" + redis.Addr}, controlR},
		{[]string{"top", "--engine", "status-r", "--metastore", "redis://" + redis.Addr, "--count", "1"}, controlR},
		{[]string{"status", "--engine", "status-e", "--config", cfgE}, controlE},
		{[]string{"top", "--engine", "status-e", "--config", cfgE, "--count", "1"}, controlE},
		{[]string{"plugins", "--engine", "status-e", "--config", cfgE}, ""},
	} {
		out, err := run(c.args...)
		name := c.args[2]
		if err != nil || !strings.Contains(out, "engine "+name) || !strings.Contains(out, c.control) {
			t.Errorf("ferry %s: %v, want engine %s at %s:\n%s", strings.Join(c.args, " "), err, name, c.control, out)
		}
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"status", "--engine", "nobody", "--metastore", "redis://" + redis.Addr}, "has no descriptor at"},
		{[]string{"status", "--engine", "status-r"}, "give --config of a cluster member"},
		{[]string{"top", "--engine", "status-r", "--config", cfgE, "--count", "1"}, "has no descriptor at"},
	} {
		if out, err := run(c.args...); err == nil || !strings.Contains(out, c.says) || !strings.Contains(out, "control address") {
			t.Errorf("ferry %s: %v, want a failure saying %q and that a control address does:\n%s", strings.Join(c.args, " "), err, c.says, out)
		}
	}
}
