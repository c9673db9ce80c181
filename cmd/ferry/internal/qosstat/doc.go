// Package qosstat is the arithmetic of `ferry bench --qos`: latency
// percentiles over a sorted sample (nearest rank), Jain's fairness index
// (plain and weight-normalised), isolation leakage (a ratio of p99s), SLO
// attainment, the steady rate of a phase's completions (what a rate cap is
// judged by: the ramp and the tail left out) and the median and range of
// per-round figures.
//
// It is pure: plain numbers and durations in, numbers out, no clock, no
// engine and no I/O, so that every figure the bench prints has a test
// with a known answer. It must not import the host or the bench: the
// bench feeds it samples and formats what it returns.
package qosstat
