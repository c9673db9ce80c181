package main_test

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type doctorLine struct {
	Area, Item, Status, Detail, Fix string
}

func doctorLines(t *testing.T, out []byte) []doctorLine {
	t.Helper()
	var lines []doctorLine
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var l doctorLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("doctor --json printed %q: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// TestDoctorHere: on this machine doctor finds tcp and shm usable, the
// embedded metastore, and says something of every machine check; a
// missing plugin is a failure with what to do, and the exit status says
// so.
func TestDoctorHere(t *testing.T) {
	lines := doctorLines(t, []byte(ferry(t, "doctor", "--json")))
	got := map[string]doctorLine{}
	for _, l := range lines {
		got[l.Area+" "+l.Item] = l
	}
	for _, k := range []string{"plugin tcp", "plugin shm", "metastore embedded"} {
		if got[k].Status != "ok" {
			t.Errorf("%s: %+v, want ok", k, got[k])
		}
	}
	for _, k := range []string{"memory memlock ulimit", "kernel ptrace scope", "kernel transparent huge pages", "topology NUMA", "topology NICs", "clock clocksource"} {
		if l, ok := got[k]; !ok || l.Detail == "" {
			t.Errorf("doctor says nothing of %s: %+v", k, l)
		}
	}

	cfg := filepath.Join(t.TempDir(), "engine.hcl")
	if err := os.WriteFile(cfg, []byte("name = \"d\"\nplugin_dir = \""+binDir+"\"\nplugin \"rdma\" {}\nplugin \"tcp\" {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(binDir, "ferry"), "doctor", "--config", cfg, "--json").Output()
	if err == nil {
		t.Error("doctor with a missing plugin exited 0")
	}
	for _, l := range doctorLines(t, out) {
		if l.Item == "rdma" && (l.Status != "fail" || !strings.Contains(l.Detail, "ferry-plugin-rdma") || !strings.Contains(l.Fix, "make build")) {
			t.Errorf("missing rdma plugin: %+v", l)
		}
	}
}

// TestDoctorPeerRails: engine B has two rails to engine A, in two network
// namespaces; with B's second link cut, doctor --peer reports the first
// rail reaching A and the second unreachable, each actually tried.
func TestDoctorPeerRails(t *testing.T) {
	ns := netnsPair(t, 2)
	write := func(name, body string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte("plugin_dir = \""+binDir+"\"\n"+body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cfgA := write("a.hcl", `name = "host-a"
metastore {
  kind   = "embedded"
  listen = "`+ns.as[0]+`:7070"
}
plugin "tcp" {
  config {
    listen = ["`+ns.as[0]+`:0", "`+ns.as[1]+`:0"]
  }
}
`)
	cfgB := write("b.hcl", `name = "host-b"
metastore {
  kind = "http"
  url  = "http://`+ns.as[0]+`:7070/metadata"
}
plugin "tcp" {
  config {
    listen = ["`+ns.bs[0]+`:0", "`+ns.bs[1]+`:0"]
  }
}
`)
	ferryBin := filepath.Join(binDir, "ferry")
	runInNetns(t, ns.A, "--config", cfgA, "--expose", "1MiB")
	if out, err := exec.Command("ip", "-n", ns.B, "link", "set", ns.vethB[1], "down").CombinedOutput(); err != nil {
		t.Fatalf("cut the second link: %v\n%s", err, out)
	}
	out, err := exec.Command("ip", "netns", "exec", ns.B, ferryBin, "doctor", "--config", cfgB, "--peer", "host-a", "--json").Output()
	t.Logf("doctor --peer with the second link cut:\n%s", out)
	if err == nil {
		t.Error("doctor with a cut rail exited 0")
	}
	rails := map[string]doctorLine{}
	for _, l := range doctorLines(t, out) {
		if l.Area == "peer" && strings.HasPrefix(l.Item, "rail ") {
			rails[strings.TrimPrefix(l.Item, "rail tcp ")] = l
		}
	}
	if l := rails[ns.bs[0]+":0"]; l.Status != "ok" {
		t.Errorf("rail %s (link up): %+v, want ok", ns.bs[0], l)
	}
	if l := rails[ns.bs[1]+":0"]; l.Status != "fail" || !strings.Contains(l.Detail, "unreachable") {
		t.Errorf("rail %s (link cut): %+v, want fail, unreachable", ns.bs[1], l)
	}
	if len(rails) != 2 {
		t.Errorf("doctor tried rails %v, want both of B's", rails)
	}
}
