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
// namespaces, and both run shm and tcp. With both links up doctor --peer
// exits 0: shm, which cannot reach another machine, is not tried and says
// why, and each of tcp's rails reads from A; the plugin lines show the
// rails B's config gives tcp. With B's second link cut, doctor exits 1
// and names that rail, the first still reaching A, each actually tried.
func TestDoctorPeerRails(t *testing.T) {
	ns := netnsPair(t, 2)
	write := func(name, body string) string {
		return writeTestFile(t, t.TempDir(), name, "plugin_dir = \""+binDir+"\"\n"+body)
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
plugin "shm" {}
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
plugin "shm" {}
`)
	ferryBin := filepath.Join(binDir, "ferry")
	runInNetns(t, ns.A, "--config", cfgA, "--expose", "1MiB")
	doctor := func(what string) (map[string]doctorLine, error) {
		t.Helper()
		out, err := exec.Command("ip", "netns", "exec", ns.B, ferryBin, "doctor", "--config", cfgB, "--peer", "host-a", "--json").Output()
		t.Logf("doctor --peer %s:\n%s", what, out)
		lines := map[string]doctorLine{}
		for _, l := range doctorLines(t, out) {
			lines[l.Area+" "+l.Item] = l
		}
		return lines, err
	}
	rail1, rail2 := "peer rail tcp "+ns.bs[0]+":0", "peer rail tcp "+ns.bs[1]+":0"

	lines, err := doctor("with both links up")
	if err != nil {
		t.Errorf("doctor --peer on a correct two-host setup: %v, want exit 0", err)
	}
	for k, l := range lines {
		if l.Status == "fail" {
			t.Errorf("%s: %+v, want no failure with both links up", k, l)
		}
	}
	if l := lines["plugin tcp"]; !strings.Contains(l.Detail, "rails "+ns.bs[0]+":0 "+ns.bs[1]+":0") {
		t.Errorf("plugin tcp: %+v, want the rails B's config gives it", l)
	}
	if l := lines["peer transport shm"]; l.Status != "info" || !strings.Contains(l.Detail, "not tried") || !strings.Contains(l.Detail, "only engines on this machine") {
		t.Errorf("peer transport shm: %+v, want it not tried, saying it reaches only this machine", l)
	}
	if _, ok := lines["peer rail shm shm"]; ok {
		t.Errorf("doctor tried shm's rail against a peer on another machine")
	}
	for _, k := range []string{"peer transport tcp", rail1, rail2} {
		if l := lines[k]; l.Status != "ok" || !strings.Contains(l.Detail, "read 4 KiB") {
			t.Errorf("%s: %+v, want ok, read", k, l)
		}
	}

	if out, err := exec.Command("ip", "-n", ns.B, "link", "set", ns.vethB[1], "down").CombinedOutput(); err != nil {
		t.Fatalf("cut the second link: %v\n%s", err, out)
	}
	lines, err = doctor("with the second link cut")
	if err == nil {
		t.Error("doctor with a cut rail exited 0")
	}
	if l := lines[rail1]; l.Status != "ok" {
		t.Errorf("%s (link up): %+v, want ok", rail1, l)
	}
	if l := lines[rail2]; l.Status != "fail" || !strings.Contains(l.Detail, "unreachable") || !strings.Contains(l.Detail, "interface "+ns.vethB[1]+" ("+ns.bs[1]+") is down") || !strings.Contains(l.Fix, ns.bs[1]) || !strings.Contains(l.Fix, ns.as[1]) {
		t.Errorf("%s (link cut): %+v, want fail, unreachable, the fix naming this rail and A's", rail2, l)
	}
	for k, l := range lines {
		if l.Status == "fail" && (strings.Contains(k, ns.bs[0]) || strings.Contains(k, "shm")) {
			t.Errorf("%s: %+v: a failure blamed on a path that works or was not tried", k, l)
		}
	}
}
