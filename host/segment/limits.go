package segment

import "fmt"

// Caps on the fields of a descriptor read from outside (a metastore, a
// peer's control service, a blob), beside MaxDescriptorSize and
// MaxBuffers. A peer or whoever writes to the metastore chooses every one
// of these; the host keeps a descriptor for as long as the segment is
// open and repeats its strings in errors, logs and Segment, so each is
// capped far above what a real engine publishes. docs/limits.md lists
// them with the other caps on input from outside.
const (
	// MaxString bounds the name, the machine id, the control address, a
	// transport's name, a rail's name and label, a buffer's location, a
	// NIC's name and address.
	MaxString = 256
	// MaxCPUList bounds a NUMA node's CPU list as sysfs writes it
	// ("0-31,64-95"; a list without ranges runs long on large machines).
	MaxCPUList = 4096
	// MaxTransports bounds the transports (endpoint blobs) and the
	// transports with rails a descriptor lists.
	MaxTransports = 64
	// MaxEndpoint bounds one transport's endpoint blob, which its plugin
	// produced (tcp's is a list of addresses, well under 1 KiB).
	MaxEndpoint = 64 << 10
	// MaxRails bounds one transport's rails.
	MaxRails = 256
	// MaxTopology bounds the NUMA nodes, the NICs, and one NIC's
	// addresses.
	MaxTopology = 1024
)

// checkLimits refuses a descriptor with a field over its cap. The message
// names the field and its size, never its content, so that an oversized
// string is not repeated into logs.
func checkLimits(key string, d *Descriptor) error {
	str := func(field, s string) error {
		if len(s) > MaxString {
			return fmt.Errorf("descriptor at %q: its %s is %d bytes, over the cap of %d: it was not written by a Ferry engine", key, field, len(s), MaxString)
		}
		return nil
	}
	count := func(field string, n, max int) error {
		if n > max {
			return fmt.Errorf("descriptor at %q lists %d %s, over the cap of %d: it was not written by a Ferry engine", key, n, field, max)
		}
		return nil
	}
	errs := []error{
		str("name", d.Name), str("machine id", d.MachineID), str("control address", d.Control),
		count("transports", len(d.Transports), MaxTransports),
		count("transports with rails", len(d.Rails), MaxTransports),
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	for i := range d.Buffers {
		if err := str(fmt.Sprintf("buffer %d location", i), string(d.Buffers[i].Location)); err != nil {
			return err
		}
	}
	for name, ep := range d.Transports {
		if err := str("transport name", name); err != nil {
			return err
		}
		if len(ep) > MaxEndpoint {
			return fmt.Errorf("descriptor at %q: transport %q's endpoint is %d bytes, over the cap of %d: it was not written by a Ferry engine", key, name, len(ep), MaxEndpoint)
		}
	}
	for name, rails := range d.Rails {
		if err := str("rails' transport name", name); err != nil {
			return err
		}
		if err := count(fmt.Sprintf("rails of transport %q", name), len(rails), MaxRails); err != nil {
			return err
		}
		for i, r := range rails {
			if err := str(fmt.Sprintf("transport %q rail %d name", name, i), r.Name); err != nil {
				return err
			}
			if err := str(fmt.Sprintf("transport %q rail %d label", name, i), r.Label); err != nil {
				return err
			}
		}
	}
	if t := d.Topology; t != nil {
		if err := count("NUMA nodes", len(t.NUMANodes), MaxTopology); err != nil {
			return err
		}
		for i, n := range t.NUMANodes {
			if len(n.CPUs) > MaxCPUList {
				return fmt.Errorf("descriptor at %q: its NUMA node %d CPU list is %d bytes, over the cap of %d: it was not written by a Ferry engine", key, i, len(n.CPUs), MaxCPUList)
			}
		}
		if err := count("NICs", len(t.NICs), MaxTopology); err != nil {
			return err
		}
		for i, n := range t.NICs {
			if err := str(fmt.Sprintf("NIC %d name", i), n.Name); err != nil {
				return err
			}
			if err := count(fmt.Sprintf("addresses of NIC %d", i), len(n.Addrs), MaxTopology); err != nil {
				return err
			}
			for j, a := range n.Addrs {
				if err := str(fmt.Sprintf("NIC %d address %d", i, j), a); err != nil {
					return err
				}
			}
		}
	}
	return nil
}
