// Package metrics exports an engine's behaviour as Prometheus series: an
// observe.Observer that counts and times every task (requests, bytes,
// stage latencies, retries, failovers, cancels, deadline misses), a
// collector that reads the engine's plugins, rails, segments and
// metastore health when scraped, and an HTTP server for /metrics.
//
// What it must not do: touch the data path beyond Observe, which
// allocates nothing once a series exists and takes no lock; call a plugin
// from Observe (plugin counters are read on scrape, bounded by a
// timeout, by one goroutine at a time); label series by peer segment
// (peers come and go, and each would multiply every series; per-peer
// figures are for `ferry status`). It does not import package host: the
// engine hands it a Source.
package metrics
