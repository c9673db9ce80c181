//go:build !race

package host_test

const raceEnabled = false

// raceSlowdown scales the time bounds a test gives work that the race
// detector slows.
const raceSlowdown = 1
