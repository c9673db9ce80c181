// Command bench-compare runs `ferry bench` for two or three builds of
// Ferry over the main rows, interleaved, and prints per row and build the
// median and min–max of each figure. It is what before/after figures of a
// change are taken with, on a quiet machine:
//
//	go run ./scripts/bench-compare --bin old=/tmp/base/bin --bin new=bin
//
// Each --bin is NAME=PATH, PATH a directory holding `ferry` and its plugins
// (what `make build` leaves in bin/) or the ferry binary itself. Every row
// runs each build --runs times in the order A B C A B C ..., so that drift
// of a busy machine falls on every build alike. Rows whose buffers cannot
// fit are skipped with the reason printed. The raw rows go to --out, one
// JSON object per line: {"bin", "run", "row" (the bench's own line), "error"}.
//
// It owns nothing but the loop and the arithmetic; the measuring is
// `ferry bench`'s, and it must not reinterpret what a build's bench reports.
package main
