package gpu

import "testing"

func TestSysfsBusID(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"00000000:19:00.0", "0000:19:00.0"},
		{"0000:19:00.0", "0000:19:00.0"},
		{"0000:C1:00.0", "0000:c1:00.0"},
		{"1:02:00.0", "0001:02:00.0"},
		{"garbage", "garbage"},
	} {
		if got := sysfsBusID(tc.in); got != tc.want {
			t.Errorf("sysfsBusID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNUMANode(t *testing.T) {
	dir := t.TempDir()
	old := sysfsPCI
	sysfsPCI = dir
	t.Cleanup(func() { sysfsPCI = old })
	if n := numaNode("0000:19:00.0"); n != -1 {
		t.Fatalf("numa node of a device sysfs lacks: %d", n)
	}
}
