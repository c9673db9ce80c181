// Package metrics exports an engine's behaviour as Prometheus series: a
// Meter that the request path adds to as it counts and times every task
// (requests, bytes, stage latencies, retries, failovers, cancels,
// deadline misses), an Observer that feeds a Meter from stage events, a
// collector that reads the engine's plugins, rails, segments and
// metastore health when scraped (with the traffic the plugins served
// peers, served.go), and an HTTP server for /metrics.
//
// What it must not do: touch the data path beyond the Meter's methods,
// which are plain atomic adds into fixed arrays (no lock, no interface
// call, no allocation, no clock read: the engine hands it times it read
// anyway; the Prometheus series are built on scrape), and a RunTally's
// plain adds, one tally per lane poller, flushed into those at the end
// of each run of completions; call a plugin from the data path (plugin counters are read on scrape,
// bounded by a timeout, by one goroutine at a time); label series by
// peer segment (peers come and go, and each would multiply every series;
// per-peer figures are for `ferry status`). It does not import package
// host: the engine hands it a Source.
package metrics
