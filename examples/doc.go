// Package examples holds the README's Go snippets as code that compiles
// and runs: `make test` runs them (examples_test.go) against real plugin
// processes, and a test checks that every Go block of the README appears
// here verbatim, so that what a new user copies works as written. It
// owns no API of its own and nothing imports it.
package examples
