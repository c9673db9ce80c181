// Command gocost is the Go half of python/bench/cost.py: it runs the same
// 4 KiB shm transfers as the Python half, through host's Go API, so that
// the two are measured in the same run, interleaved. It reads one command
// a line on stdin ("transfer N" or "batch N") and answers one line, the
// mean nanoseconds per transfer of the N it ran; "transferq N" times each
// transfer and answers "mean p10 p50". It owns nothing else and nothing
// imports it.
package main
