package main_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

type conformanceCase struct {
	Name, Result, Why string
	Optional          bool
}

type conformanceReport struct {
	Name   string
	Cases  []conformanceCase
	Passed int
	Failed int
	Errors []string
}

// conformance runs `ferry conformance --json` and returns its report and
// whether it exited non-zero.
func conformance(t *testing.T, args ...string) (conformanceReport, bool) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "ferry"), append([]string{"conformance", "--json"}, args...)...)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("ferry conformance %v: %v", args, err)
	}
	var r conformanceReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("ferry conformance %v printed %q: %v", args, out, err)
	}
	return r, err != nil
}

func (r conformanceReport) find(name string) conformanceCase {
	for _, c := range r.Cases {
		if c.Name == name {
			return c
		}
	}
	return conformanceCase{}
}

// TestConformancePasses: the repository's plugins pass every case that
// applies to them, and a skip for an optional interface is listed as
// such.
func TestConformancePasses(t *testing.T) {
	// tcp on two listen addresses: two rails.
	two := filepath.Join(t.TempDir(), "tcp.hcl")
	if err := os.WriteFile(two, []byte(`listen = ["127.0.0.1:0", "127.0.0.1:0"]`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"ferry-plugin-tcp", "ferry-plugin-shm"} {
		t.Run(p, func(t *testing.T) {
			args := []string{filepath.Join(binDir, p), "--timeout", "20s"}
			if p == "ferry-plugin-tcp" {
				args = append(args, "--config", two)
			}
			r, failed := conformance(t, args...)
			if failed || r.Failed != 0 {
				t.Fatalf("%s fails conformance: %+v", p, r)
			}
			if r.Passed < 12 {
				t.Errorf("%s: only %d cases passed: %+v", p, r.Passed, r)
			}
			if c := r.find("Rails"); p == "ferry-plugin-tcp" && c.Result != "PASS" {
				t.Errorf("tcp on two rails: Rails %+v, want PASS", c)
			}
			if c := r.find("Drain"); c.Result != "SKIP" || !c.Optional {
				t.Errorf("%s: Drain, an optional interface it lacks: %+v, want an optional SKIP", p, c)
			}
		})
	}
}

// TestConformanceNamesFailures: against deliberately broken plugins,
// the failing case names what is wrong, the other cases run on, and the
// command exits non-zero.
func TestConformanceNamesFailures(t *testing.T) {
	dir := t.TempDir()
	broken := func(mode string) string {
		p := filepath.Join(dir, "ferry-plugin-broken-"+mode)
		if err := os.Symlink(filepath.Join(binDir, "ferry-plugin-broken"), p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fault := func(name, body string) []string {
		f := filepath.Join(dir, name+".hcl")
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return []string{filepath.Join(binDir, "ferry-plugin-fault"), "--config", f}
	}
	for _, tc := range []struct {
		name     string
		args     []string
		run      string // the cases to run, besides Start
		fails    string // the case that fails
		why      []string
		passes   string // a case that still passes after it
		noMemory bool
	}{
		{"stray token", fault("flip", "fault \"flip\" {\n  bit = 40\n  after = 20\n}\n"), "RoundTrips|Nop", "RoundTrips", []string{"stray completion token", "differs in bit 40"}, "Nop", false},
		{"over-reported byte count", fault("over", "fault \"overreport\" {\n  extra = 4096\n  after = 20\n}\n"), "RoundTrips|Nop", "RoundTrips", []string{"over-reported byte count", "its descriptor carried"}, "Nop", false},
		{"hang", fault("stall", "fault \"stall\" {\n  after = 20\n}\n"), "RoundTrips|Nop", "RoundTrips", []string{"hang: no completion for token", "within 2s"}, "Nop", false},
		{"panic", []string{broken("panic")}, "RoundTrips|Nop", "RoundTrips", []string{"the plugin died", "exit status 2", "panic: ferry-plugin-broken: the 40th descriptor"}, "Nop", false},
		{"MaxSlice 2^64-1", []string{broken("maxslice")}, "Declarations|Nop", "Declarations", []string{"MaxSlice = 18446744073709551615 is above the sane bound"}, "Nop", false},
		{"memory kind it cannot serve", []string{broken("badkind")}, "MemoryKinds|Nop", "MemoryKinds", []string{`declares memory kind "file" but cannot serve it`, "no file backend"}, "Nop", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, failed := conformance(t, append(tc.args, "--timeout", "2s", "--run", tc.run)...)
			if !failed {
				t.Errorf("exit status 0 with a failure")
			}
			c := r.find(tc.fails)
			if c.Result != "FAIL" {
				t.Fatalf("%s: %+v, want FAIL; report %+v", tc.fails, c, r)
			}
			for _, w := range tc.why {
				if !strings.Contains(c.Why, w) {
					t.Errorf("%s fails with %q, which does not say %q", tc.fails, c.Why, w)
				}
			}
			if p := r.find(tc.passes); p.Result != "PASS" {
				t.Errorf("the case after the failure, %s: %+v, want PASS (a failure fails only its case)", tc.passes, p)
			}
		})
	}
}
