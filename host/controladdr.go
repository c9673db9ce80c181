package host

import (
	"net"
	"net/netip"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/path"
)

// The control service is what peers call to fetch this engine's
// descriptor, send it notifications and ask its status, so the address in
// the descriptor must be one they can use. These functions are pure: the
// engine hands them its configuration, its rails' addresses and its
// interfaces' addresses.

// controlListen says where to bind the control service: the configured
// address, or, when none is configured, the address of the engine's first
// routable rail (port 0), so that an engine whose tcp plugin listens on
// 10.0.0.1 serves control there too, else config.DefaultControlListen.
// warn is non-empty when the choice leaves remote peers unable to reach
// it although the engine's transports are reachable.
func controlListen(configured string, rails []string) (bind, warn string) {
	routable, ok := firstRoutable(rails)
	if configured != "" {
		if ip := hostIP(configured); ok && ip.IsValid() && ip.IsLoopback() {
			warn = "control.listen " + configured + " is a loopback address: peers on other hosts cannot fetch this engine's descriptor or notify it, " +
				"though its transports listen on " + routable.String() + "; set control { listen = \"" + net.JoinHostPort(routable.String(), "0") + "\" }"
		}
		return configured, warn
	}
	if ok {
		return net.JoinHostPort(routable.String(), "0"), ""
	}
	return config.DefaultControlListen, ""
}

// controlPublished is the address to publish for a control service bound
// at bound: bound itself, or, when it is a wildcard (0.0.0.0 or ::), the
// same port on the first routable address of the rails or, failing them,
// of the interfaces. A wildcard with nothing routable publishes loopback,
// usable by same-host peers only; ok is false then.
func controlPublished(bound string, rails, ifaces []string) (addr string, ok bool) {
	host, port, err := net.SplitHostPort(bound)
	if err != nil {
		return bound, true
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsUnspecified() {
		return bound, true
	}
	if r, found := firstRoutable(rails); found {
		return net.JoinHostPort(r.String(), port), true
	}
	for _, a := range ifaces {
		if p, err := netip.ParsePrefix(a); err == nil && routable(p.Addr()) {
			return net.JoinHostPort(p.Addr().String(), port), true
		}
	}
	return net.JoinHostPort("127.0.0.1", port), false
}

// firstRoutable is the first rail address (host:port) whose host is an
// IP that peers on another host could use.
func firstRoutable(rails []string) (netip.Addr, bool) {
	for _, r := range rails {
		if ip := hostIP(r); ip.IsValid() && routable(ip) {
			return ip, true
		}
	}
	return netip.Addr{}, false
}

func routable(ip netip.Addr) bool {
	return !ip.IsLoopback() && !ip.IsUnspecified() && !ip.IsLinkLocalUnicast() && !ip.IsMulticast()
}

// hostIP is the IP of a host:port, or the zero Addr when its host is not
// an IP (a name, or not host:port at all).
func hostIP(hostport string) netip.Addr {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return netip.Addr{}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return ip.Unmap()
}

// railAddrs lists the rail names of the usable plugins of ps, for the
// control address: a tcp rail's name is its listen address.
func railAddrs(ps []*path.Plugin) []string {
	var out []string
	for _, p := range ps {
		if !p.Usable() {
			continue
		}
		if rs := p.Rails(); rs != nil {
			for _, ri := range rs.Rails() {
				out = append(out, ri.Name)
			}
		}
	}
	return out
}

// allInterfaceAddrs lists this host's interface addresses as prefixes.
func allInterfaceAddrs() []string { return addrStrings(net.InterfaceAddrs()) }
