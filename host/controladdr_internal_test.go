package host

import "testing"

func TestControlListen(t *testing.T) {
	for _, c := range []struct {
		name, configured string
		rails            []string
		bind             string
		warns            bool
	}{
		{"single host default", "", []string{"127.0.0.1:7100"}, "127.0.0.1:0", false},
		{"no rails", "", nil, "127.0.0.1:0", false},
		{"follows the tcp listen address", "", []string{"127.0.0.1:1", "10.0.0.1:7100"}, "10.0.0.1:0", false},
		{"ipv6 rail", "", []string{"[fd00::1]:7100"}, "[fd00::1]:0", false},
		{"a name is not an address", "", []string{"shm0"}, "127.0.0.1:0", false},
		{"configured wins", "10.0.0.2:7071", []string{"10.0.0.1:7100"}, "10.0.0.2:7071", false},
		{"configured loopback beside a routable rail warns", "127.0.0.1:7071", []string{"10.0.0.1:7100"}, "127.0.0.1:7071", true},
		{"configured loopback on a loopback engine", "127.0.0.1:7071", []string{"127.0.0.1:7100"}, "127.0.0.1:7071", false},
	} {
		bind, warn := controlListen(c.configured, c.rails)
		if bind != c.bind || (warn != "") != c.warns {
			t.Errorf("%s: controlListen(%q, %v) = %q, warn %q; want %q, warning %v", c.name, c.configured, c.rails, bind, warn, c.bind, c.warns)
		}
	}
}

func TestControlPublished(t *testing.T) {
	for _, c := range []struct {
		name, bound   string
		rails, ifaces []string
		want          string
		ok            bool
	}{
		{"specific address as bound", "10.0.0.1:4000", nil, nil, "10.0.0.1:4000", true},
		{"loopback as bound", "127.0.0.1:4000", nil, nil, "127.0.0.1:4000", true},
		{"wildcard takes the rail's address", "0.0.0.0:4000", []string{"10.0.0.1:7100"}, []string{"192.168.1.5/24"}, "10.0.0.1:4000", true},
		{"wildcard takes an interface's address", "[::]:4000", []string{"127.0.0.1:7100"}, []string{"127.0.0.1/8", "fe80::1/64", "192.168.1.5/24"}, "192.168.1.5:4000", true},
		{"wildcard with nothing routable", "0.0.0.0:4000", nil, []string{"127.0.0.1/8"}, "127.0.0.1:4000", false},
	} {
		got, ok := controlPublished(c.bound, c.rails, c.ifaces)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: controlPublished(%q) = %q, %v; want %q, %v", c.name, c.bound, got, ok, c.want, c.ok)
		}
	}
}
