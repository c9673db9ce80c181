package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, with
// the build events of go1.24).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	Elapsed     float64
	ImportPath  string // build-output, build-fail
	FailedBuild string // on a package's fail: the package whose build failed
}

type pkg struct {
	started time.Time
	tests   map[string][]string // output of each test still running
	out     []string            // the package's own output
}

type finished struct {
	name    string
	elapsed float64
}

// Reporter turns go test's JSON events into one line per package. It is
// plain data: the caller feeds it lines and the time, and serializes
// calls.
type Reporter struct {
	w        io.Writer
	start    time.Time
	said     time.Time // when a line was last printed
	pkgs     map[string]*pkg
	builds   map[string][]string // build output per import path
	ok, none int
	failed   []string
	done     []finished
}

// NewReporter returns a Reporter that writes to w, for a run that began
// at start.
func NewReporter(w io.Writer, start time.Time) *Reporter {
	return &Reporter{w: w, start: start, said: start, pkgs: map[string]*pkg{}, builds: map[string][]string{}}
}

func (r *Reporter) printf(now time.Time, format string, args ...any) {
	fmt.Fprintf(r.w, format, args...)
	r.said = now
}

func (r *Reporter) pkg(name string, now time.Time) *pkg {
	p := r.pkgs[name]
	if p == nil {
		p = &pkg{started: now, tests: map[string][]string{}}
		r.pkgs[name] = p
	}
	return p
}

// Line takes one line of go test's standard output.
func (r *Reporter) Line(line []byte, now time.Time) {
	var e event
	if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
		r.printf(now, "%s\n", line) // not an event: go's own words
		return
	}
	switch e.Action {
	case "build-output":
		r.builds[e.ImportPath] = append(r.builds[e.ImportPath], e.Output)
		return
	case "build-fail":
		return // reported with the package that needed it
	}
	if e.Package == "" {
		return
	}
	p := r.pkg(e.Package, now)
	if e.Action == "start" {
		p.started = now
		return
	}
	if e.Test != "" {
		switch e.Action {
		case "output":
			p.tests[e.Test] = append(p.tests[e.Test], e.Output)
		case "fail":
			r.printf(now, "%s", strings.Join(p.tests[e.Test], ""))
			delete(p.tests, e.Test)
		case "pass", "skip":
			delete(p.tests, e.Test)
		}
		return
	}
	switch e.Action {
	case "output":
		p.out = append(p.out, e.Output)
	case "pass":
		r.ok++
		r.finish(e, now, "ok  ")
	case "skip":
		r.none++ // no test files
		delete(r.pkgs, e.Package)
	case "fail":
		r.failed = append(r.failed, e.Package)
		if e.FailedBuild != "" {
			r.printf(now, "%s", strings.Join(r.builds[e.FailedBuild], ""))
		}
		// What no failed test printed: a panic, a timeout, TestMain.
		var rest []string
		for _, o := range p.out {
			if !framing(o) {
				rest = append(rest, o)
			}
		}
		for _, lines := range p.tests { // tests that never ended
			rest = append(rest, lines...)
		}
		r.printf(now, "%s", strings.Join(rest, ""))
		r.finish(e, now, "FAIL")
	}
}

func (r *Reporter) finish(e event, now time.Time, word string) {
	r.done = append(r.done, finished{e.Package, e.Elapsed})
	delete(r.pkgs, e.Package)
	r.printf(now, "%s %-52s %8s  (+%s)\n", word, e.Package, seconds(e.Elapsed), short(now.Sub(r.start)))
}

// Tick prints what is still running when nothing was said for a minute.
func (r *Reporter) Tick(now time.Time) {
	if now.Sub(r.said) < time.Minute {
		return
	}
	var running []string
	for name, p := range r.pkgs {
		running = append(running, fmt.Sprintf("%s (%s)", name, short(now.Sub(p.started))))
	}
	slices.Sort(running)
	what := "building test binaries"
	if len(running) > 0 {
		what = "running " + strings.Join(running, ", ")
	}
	r.printf(now, "... +%s: %d packages done; %s\n", short(now.Sub(r.start)), len(r.done), what)
}

// Summary prints the closing lines and reports whether every package
// passed.
func (r *Reporter) Summary(now time.Time) bool {
	slices.SortFunc(r.done, func(a, b finished) int {
		switch {
		case a.elapsed > b.elapsed:
			return -1
		case a.elapsed < b.elapsed:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	var slow []string
	for _, f := range r.done[:min(5, len(r.done))] {
		slow = append(slow, fmt.Sprintf("%s %s", strings.TrimPrefix(f.name, "github.com/ferrydev/ferry/"), seconds(f.elapsed)))
	}
	verdict := "PASS"
	if len(r.failed) > 0 {
		verdict = "FAIL: " + strings.Join(r.failed, " ")
	}
	r.printf(now, "go test: %d packages ok, %d failed, %d without tests, in %s; slowest: %s\n%s\n",
		r.ok, len(r.failed), r.none, short(now.Sub(r.start)), strings.Join(slow, ", "), verdict)
	return len(r.failed) == 0
}

// framing is go test's own line around results, which the package's
// line replaces.
func framing(o string) bool {
	for _, p := range []string{"=== ", "--- PASS", "PASS\n", "FAIL\n", "FAIL\t", "ok  \t"} {
		if strings.HasPrefix(o, p) {
			return true
		}
	}
	return false
}

func seconds(s float64) string { return fmt.Sprintf("%.1fs", s) }

// short is d as "42s" or "3m07s".
func short(d time.Duration) string {
	s := int(d.Round(time.Second).Seconds())
	if s < 60 {
		return fmt.Sprintf("%ds", s)
	}
	return fmt.Sprintf("%dm%02ds", s/60, s%60)
}
