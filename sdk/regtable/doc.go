// Package regtable is a building block for transport plugins: a table of
// registered memory regions that the data path reads without locks, and a
// reference count that lets UnregisterMemory wait until no operation still
// touches a region's memory (the SDK unmaps it right after).
//
// It owns no goroutines and knows nothing of transports.
package regtable
