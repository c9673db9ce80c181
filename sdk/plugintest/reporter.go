package plugintest

import "testing"

// TB is what the conformance suite and Instance need of a test: the part
// of testing.TB they use. *testing.T and *testing.B satisfy it, and so
// does `ferry conformance`, which runs the suite against a binary with no
// Go toolchain. Fatalf and Skipf end the calling goroutine, as testing's
// do (runtime.Goexit), so they are called only from the goroutine that
// runs the test or case.
type TB interface {
	Helper()
	Logf(format string, args ...any)
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
	Failed() bool
	Cleanup(func())
}

// Reporter runs the suite's cases: a TB that runs named sub-cases, each
// on its own goroutine, and waits for them. Testing(t) adapts a
// *testing.T (the cases become subtests); `ferry conformance` prints one
// line per case.
type Reporter interface {
	TB
	// Run runs f as the case name and reports whether it passed (a
	// skipped case did not fail).
	Run(name string, f func(Reporter)) bool
}

// Testing adapts t to a Reporter: each case is a subtest.
func Testing(t *testing.T) Reporter { return testingReporter{t} }

type testingReporter struct{ *testing.T }

func (r testingReporter) Run(name string, f func(Reporter)) bool {
	return r.T.Run(name, func(t *testing.T) { f(testingReporter{t}) })
}
