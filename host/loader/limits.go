package loader

import (
	"fmt"

	"github.com/ferrydev/ferry/internal/pluginclient"
)

// What a plugin may say about itself in Describe. A plugin chooses these
// strings and lists, and the host keeps them for the plugin's life and
// repeats them in status, logs and errors, so each has a cap far above
// what a real plugin sends (gRPC alone would let one through at 4 MiB).
// The handshake line is capped in internal/pluginclient.
const (
	MaxDescribeString = 256 // bytes: the name, the version, each memory kind and interface name
	MaxDescribeList   = 64  // entries: ops, memory kinds, interfaces
)

// What a plugin may declare about slice sizes. The host cuts every request
// by them (host/slicer), so a value far outside what any transport takes
// would stall every task on the plugin (a preferred slice of 2^64-1
// overflows the slice count to 0: nothing is sent and every task times
// out) or cut a 16 MiB request into millions of descriptors. 0 means "not
// said" and is always taken.
const (
	// MinDeclaredSlice is the least MaxSlice or PreferredSlice: a page,
	// the least the config's slice_size and tcp's max_frame take.
	MinDeclaredSlice = 4 << 10
	// MaxDeclaredSlice bounds MaxSlice: 1 TiB, the most receiver credit
	// grants (config.MaxCreditBytes).
	MaxDeclaredSlice = 1 << 40
	// MaxDeclaredPreferredSlice bounds PreferredSlice: 1 GiB, the most the
	// config's slice_size takes (config.MaxSliceSize); shm prefers 64 MiB.
	MaxDeclaredPreferredSlice = 1 << 30
)

// checkDescription refuses a description with a string or list over its
// cap. The message names the field and its size, never its content.
func checkDescription(d pluginclient.Description) error {
	str := func(field, s string) error {
		if len(s) > MaxDescribeString {
			return fmt.Errorf("its %s is %d bytes, over the cap of %d; the plugin is faulty or not a Ferry plugin", field, len(s), MaxDescribeString)
		}
		return nil
	}
	list := func(field string, n int) error {
		if n > MaxDescribeList {
			return fmt.Errorf("it lists %d %s, over the cap of %d; the plugin is faulty or not a Ferry plugin", n, field, MaxDescribeList)
		}
		return nil
	}
	if err := str("name", d.Name); err != nil {
		return err
	}
	if err := str("version", d.Version); err != nil {
		return err
	}
	if err := list("ops", len(d.Ops)); err != nil {
		return err
	}
	if err := list("memory kinds", len(d.MemoryKinds)); err != nil {
		return err
	}
	for i, k := range d.MemoryKinds {
		if err := str(fmt.Sprintf("memory kind %d", i), string(k)); err != nil {
			return err
		}
	}
	if err := list("interfaces", len(d.Interfaces)); err != nil {
		return err
	}
	slice := func(field string, v, hi uint64) error {
		if v != 0 && (v < MinDeclaredSlice || v > hi) {
			return fmt.Errorf("its %s is %d bytes, outside the bounds %d (4 KiB) to %d bytes (0: not declared); the plugin is faulty or not a Ferry plugin", field, v, MinDeclaredSlice, hi)
		}
		return nil
	}
	if err := slice("MaxSlice", d.MaxSlice, MaxDeclaredSlice); err != nil {
		return err
	}
	if err := slice("PreferredSlice", d.PreferredSlice, MaxDeclaredPreferredSlice); err != nil {
		return err
	}
	for i, n := range d.Interfaces {
		if err := str(fmt.Sprintf("interface %d", i), n); err != nil {
			return err
		}
	}
	return nil
}
