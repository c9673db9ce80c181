package main

import (
	"strings"
	"testing"
	"time"
)

func feed(r *Reporter, now time.Time, lines ...string) {
	for _, l := range lines {
		r.Line([]byte(l), now)
	}
}

// A package is reported when it finishes, not in go test's order, and a
// failed test's output appears with it.
func TestReporterLines(t *testing.T) {
	var b strings.Builder
	t0 := time.Unix(1000, 0)
	r := NewReporter(&b, t0)
	feed(r, t0.Add(5*time.Second),
		`{"Action":"start","Package":"ex/slow"}`,
		`{"Action":"start","Package":"ex/fast"}`,
		`{"Action":"run","Package":"ex/fast","Test":"TestA"}`,
		`{"Action":"output","Package":"ex/fast","Test":"TestA","Output":"=== RUN   TestA\n"}`,
		`{"Action":"output","Package":"ex/fast","Test":"TestA","Output":"    a_test.go:9: boom\n"}`,
		`{"Action":"output","Package":"ex/fast","Test":"TestA","Output":"--- FAIL: TestA (0.00s)\n"}`,
		`{"Action":"fail","Package":"ex/fast","Test":"TestA","Elapsed":0}`,
		`{"Action":"output","Package":"ex/fast","Output":"FAIL\n"}`,
		`{"Action":"fail","Package":"ex/fast","Elapsed":1.5}`,
		`{"Action":"output","Package":"ex/none","Output":"?   \tex/none\t[no test files]\n"}`,
		`{"Action":"skip","Package":"ex/none","Elapsed":0}`,
		`not json: go's own words`,
	)
	feed(r, t0.Add(70*time.Second), `{"Action":"pass","Package":"ex/slow","Elapsed":64.2}`)
	if r.Summary(t0.Add(71 * time.Second)) {
		t.Error("Summary reported a pass with ex/fast failed")
	}
	got := b.String()
	for _, want := range []string{
		"    a_test.go:9: boom\n--- FAIL: TestA (0.00s)\nFAIL ex/fast",
		"not json: go's own words\n",
		"ok   ex/slow",
		"64.2s  (+1m10s)",
		"go test: 1 packages ok, 1 failed, 1 without tests, in 1m11s; slowest: ex/slow 64.2s, ex/fast 1.5s\nFAIL: ex/fast\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Index(got, "FAIL ex/fast") > strings.Index(got, "ok   ex/slow") {
		t.Errorf("ex/fast, finished first, is printed after ex/slow:\n%s", got)
	}
	if strings.Contains(got, "no test files") {
		t.Errorf("a package without tests got a line:\n%s", got)
	}
}

// A build failure prints the compiler's words with the package.
func TestReporterBuildFail(t *testing.T) {
	var b strings.Builder
	t0 := time.Unix(1000, 0)
	r := NewReporter(&b, t0)
	feed(r, t0,
		`{"ImportPath":"ex/bad","Action":"build-output","Output":"ex/bad/x.go:3:1: syntax error\n"}`,
		`{"ImportPath":"ex/bad","Action":"build-fail"}`,
		`{"Action":"start","Package":"ex/bad"}`,
		`{"Action":"output","Package":"ex/bad","Output":"FAIL\tex/bad [build failed]\n"}`,
		`{"Action":"fail","Package":"ex/bad","Elapsed":0,"FailedBuild":"ex/bad"}`,
	)
	if got := b.String(); !strings.Contains(got, "ex/bad/x.go:3:1: syntax error\nFAIL ex/bad") {
		t.Errorf("the build failure is not shown with its package:\n%s", got)
	}
}

// After a minute without a line, Tick says what is running; before, nothing.
func TestReporterTick(t *testing.T) {
	var b strings.Builder
	t0 := time.Unix(1000, 0)
	r := NewReporter(&b, t0)
	r.Tick(t0.Add(59 * time.Second))
	if b.Len() != 0 {
		t.Fatalf("Tick spoke before a quiet minute: %q", b.String())
	}
	r.Tick(t0.Add(61 * time.Second))
	if want := "... +1m01s: 0 packages done; building test binaries\n"; b.String() != want {
		t.Fatalf("Tick said %q, want %q", b.String(), want)
	}
	b.Reset()
	feed(r, t0.Add(100*time.Second), `{"Action":"start","Package":"ex/host"}`)
	r.Tick(t0.Add(130 * time.Second))
	if want := "... +2m10s: 0 packages done; running ex/host (30s)\n"; b.String() != want {
		t.Fatalf("Tick said %q, want %q", b.String(), want)
	}
	b.Reset()
	r.Tick(t0.Add(180 * time.Second))
	if b.Len() != 0 {
		t.Fatalf("Tick spoke 50s after its last line: %q", b.String())
	}
}
