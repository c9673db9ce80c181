package gpu

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// sysfsPCI is where Linux lists PCI devices; a variable for tests.
var sysfsPCI = "/sys/bus/pci/devices"

// sysfsBusID turns a driver's PCI bus id ("00000000:19:00.0",
// "0000:19:00.0", upper or lower case) into sysfs's name for the device
// ("0000:19:00.0"): lower case, a four-digit domain.
func sysfsBusID(id string) string {
	id = strings.ToLower(strings.TrimSpace(id))
	dom, rest, ok := strings.Cut(id, ":")
	if !ok {
		return id
	}
	if len(dom) > 4 {
		dom = dom[len(dom)-4:]
	}
	for len(dom) < 4 {
		dom = "0" + dom
	}
	return dom + ":" + rest
}

// numaNode reads the NUMA node of the PCI device busID from sysfs; -1
// when unknown (no such file, or the kernel says -1).
func numaNode(busID string) int {
	b, err := os.ReadFile(filepath.Join(sysfsPCI, sysfsBusID(busID), "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}
