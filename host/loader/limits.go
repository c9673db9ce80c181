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
	for i, n := range d.Interfaces {
		if err := str(fmt.Sprintf("interface %d", i), n); err != nil {
			return err
		}
	}
	return nil
}
