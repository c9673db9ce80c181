package tcp

import (
	"math/bits"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ferrydev/ferry/sdk"
)

// Rails. Local rail i is listen address i: it accepts peers' connections
// there, and the connections it dials leave from that address's IP. A
// descriptor's Rail field names the local rail; each (peer, rail) pair has
// its own connections_per_peer slots.

// rail is one local rail: its listen IP and its counters.
type rail struct {
	idx int
	ip  netip.Addr // the bound listen IP, unmapped; unspecified for a wildcard
	railCounters
}

func newRail(idx int, ln net.Listener) *rail {
	r := &rail{idx: idx}
	if a, ok := ln.Addr().(*net.TCPAddr); ok {
		r.ip = a.AddrPort().Addr().Unmap()
	}
	return r
}

// dialTarget is one peer address a rail may dial, and the source address
// to bind (nil: let the kernel choose).
type dialTarget struct {
	addr  string
	local *net.TCPAddr
}

// dialPlan lists the peer addresses rail idx (with IP local) dials, in the
// order it tries them: the paired address first, then the others in
// endpoint order from there, wrapping around. Falling back to another of the peer's addresses keeps the
// traffic on the local rail: the source stays bound where it can be.
func dialPlan(local netip.Addr, idx int, peer []string) []dialTarget {
	m := len(peer)
	first := pairRail(local, idx, peer)
	plan := make([]dialTarget, 0, m)
	for k := range m {
		a := peer[(first+k)%m]
		plan = append(plan, dialTarget{addr: a, local: dialSource(local, a)})
	}
	return plan
}

// pairRail picks which of the peer's addresses local rail idx (with IP
// local) dials: the one sharing the longest IP prefix with local, among
// addresses of local's family first; ties go to the first tied address
// from index idx mod len(peer) on, so rails that match the peer equally
// spread over its addresses. A wildcard local IP matches every address
// equally; a host name matches nothing. peer must not be empty.
func pairRail(local netip.Addr, idx int, peer []string) int {
	m := len(peer)
	best, bestScore := idx%m, -2
	for k := range m {
		j := (idx + k) % m
		if s := pairScore(local, peer[j]); s > bestScore {
			best, bestScore = j, s
		}
	}
	return best
}

// pairScore is how well peer address a matches local IP: the common prefix
// length in bits within the same family, -1 across families or for a name.
func pairScore(local netip.Addr, a string) int {
	if !local.IsValid() || local.IsUnspecified() {
		return 0
	}
	ap, err := netip.ParseAddrPort(a)
	if err != nil {
		return -1
	}
	p := ap.Addr().Unmap()
	if p.Is4() != local.Is4() {
		return -1
	}
	return commonPrefixLen(local, p)
}

// commonPrefixLen counts the leading bits a and b (of one family) share.
func commonPrefixLen(a, b netip.Addr) int {
	x, y := a.As16(), b.As16()
	skip := 0
	if a.Is4() {
		skip = 12 // As16 puts an IPv4 address in the last four bytes
	}
	n := 0
	for i := skip; i < 16; i++ {
		if d := x[i] ^ y[i]; d != 0 {
			return n + bits.LeadingZeros8(d)
		}
		n += 8
	}
	return n
}

// dialSource is the source address a rail with IP local binds to dial
// target, or nil to leave it to the kernel: for a wildcard listen address
// (no rail IP to keep to), across address families, and between loopback
// and the outside (a loopback source cannot reach another machine, and
// traffic to this machine leaves through no NIC). For a target named by
// host name only the last rule can be checked, and only from the local
// side.
func dialSource(local netip.Addr, target string) *net.TCPAddr {
	if !local.IsValid() || local.IsUnspecified() {
		return nil
	}
	if ap, err := netip.ParseAddrPort(target); err == nil {
		t := ap.Addr().Unmap()
		if t.Is4() != local.Is4() || t.IsLoopback() != local.IsLoopback() {
			return nil
		}
	} else if local.IsLoopback() {
		return nil
	}
	return net.TCPAddrFromAddrPort(netip.AddrPortFrom(local, 0))
}

// sysfsRoot is where Probe reads interface facts; tests point it at fixture
// files.
var sysfsRoot = "/sys"

// probeRail describes the rail listening on addr: the NUMA node and link
// speed of the interface that owns its IP, from sysfs. Loopback, wildcard
// and unresolved addresses, and facts sysfs does not have, read as unknown
// (NUMA node -1, bandwidth 0).
func probeRail(addr string) sdk.Rail {
	r := sdk.Rail{Name: addr, NUMANode: -1}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return r
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return r
	}
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() || ip.IsUnspecified() {
		return r
	}
	name := interfaceOwning(ip)
	if name == "" {
		return r
	}
	r.NUMANode, r.BandwidthGbps = interfaceFacts(name)
	return r
}

// interfaceOwning returns the name of the interface that has ip, or "".
func interfaceOwning(ip netip.Addr) string {
	ifs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			n, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
				return ifc.Name
			}
		}
	}
	return ""
}

// interfaceFacts reads the NUMA node of interface name's device (-1 when
// missing or negative) and its link speed (sysfs says Mb/s; missing,
// unknown or unreadable: 0).
func interfaceFacts(name string) (numa int, gbps float64) {
	dir := filepath.Join(sysfsRoot, "class", "net", name)
	numa = -1
	if n, ok := readSysfsInt(filepath.Join(dir, "device", "numa_node")); ok && n >= 0 {
		numa = int(n)
	}
	if n, ok := readSysfsInt(filepath.Join(dir, "speed")); ok && n > 0 {
		gbps = float64(n) / 1000
	}
	return numa, gbps
}

func readSysfsInt(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n, err == nil
}
