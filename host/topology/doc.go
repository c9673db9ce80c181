// Package topology discovers what the machine offers transfers: its NUMA
// nodes and CPUs, its network interfaces and the NUMA node each sits on,
// from sysfs. The engine publishes it in its segment descriptor so that
// peers (and operators) can see where its rails are.
//
// Discovery reads files under a root that tests point at a fixture; what
// sysfs does not have (a VM's virtual NIC has no device/numa_node) is
// reported as unknown, never guessed.
package topology
