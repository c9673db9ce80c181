package segment

import (
	"errors"
	"strings"
	"testing"
)

func TestTranslate(t *testing.T) {
	bufs := []Buffer{
		{Region: 1, Base: 0x1000, Length: 0x1000, Perm: PermRemoteReadWrite},
		{Region: 2, Base: 0x3000, Length: 0x100, Perm: PermRemoteRead},
		{Region: 3, Base: 0x4000, Length: 0x100, Perm: PermLocal},
	}
	cases := []struct {
		name         string
		addr, length uint64
		write        bool
		region       uint32
		off          uint64
		err          error
	}{
		{"start", 0x1000, 1, true, 1, 0, nil},
		{"whole", 0x1000, 0x1000, false, 1, 0, nil},
		{"odd offset", 0x1003, 5, true, 1, 3, nil},
		{"last byte", 0x1fff, 1, false, 1, 0xfff, nil},
		{"one past end", 0x1fff, 2, false, 0, 0, ErrOutOfBounds},
		{"gap", 0x2000, 1, false, 0, 0, ErrNoBuffer},
		{"below", 0x10, 1, false, 0, 0, ErrNoBuffer},
		{"overflow", 0x1000, ^uint64(0), false, 0, 0, ErrOutOfBounds},
		{"read read-only", 0x3000, 0x100, false, 2, 0, nil},
		{"write read-only", 0x3000, 1, true, 0, 0, ErrPermission},
		{"read local", 0x4000, 1, false, 0, 0, ErrPermission},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, off, err := Translate(bufs, c.addr, c.length, c.write)
			if !errors.Is(err, c.err) {
				t.Fatalf("err = %v, want %v", err, c.err)
			}
			if err == nil && (r != c.region || off != c.off) {
				t.Fatalf("got region %d off %#x, want %d %#x", r, off, c.region, c.off)
			}
		})
	}
}

func TestTranslateAllocatesNothing(t *testing.T) {
	bufs := []Buffer{{Region: 1, Base: 0x1000, Length: 0x1000, Perm: PermRemoteReadWrite}}
	if n := testing.AllocsPerRun(100, func() { Translate(bufs, 0x1100, 10, true) }); n != 0 {
		t.Fatalf("Translate allocates %v times", n)
	}
}

func TestDecode(t *testing.T) {
	good := `{"schema":1,"name":"a","incarnation":7,"machine_id":"m","buffers":[{"region":2,"base":8192,"length":10,"perm":"remote-read"},{"region":1,"base":4096,"length":10,"perm":"remote-read-write"}]}`
	d, err := Decode("k", []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if d.Buffers[0].Region != 1 {
		t.Fatalf("buffers not sorted by base: %+v", d.Buffers)
	}
	bad := []struct{ name, in, want string }{
		{"not json", `xx`, "not a Ferry segment descriptor"},
		{"newer schema", `{"schema":3,"name":"a","incarnation":1}`, "schema version 3"},
		{"foreign", `{"hello":"world"}`, "incomplete"},
		{"overlap", `{"schema":1,"name":"a","incarnation":1,"buffers":[{"region":1,"base":0,"length":10,"perm":"local"},{"region":2,"base":5,"length":10,"perm":"local"}]}`, "overlap"},
		{"perm", `{"schema":1,"name":"a","incarnation":1,"buffers":[{"region":1,"base":0,"length":10,"perm":"rw"}]}`, "unknown permission"},
		{"wrap", `{"schema":1,"name":"a","incarnation":1,"buffers":[{"region":1,"base":18446744073709551615,"length":10,"perm":"local"}]}`, "bad range"},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := Decode("ferry/segments/a", []byte(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "ferry/segments/a") {
				t.Fatalf("err = %v, want it to mention %q and the key", err, c.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"schema":1,"name":"a","incarnation":7,"buffers":[{"region":1,"base":4096,"length":10,"perm":"remote-read"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode("k", b)
		if err != nil {
			return
		}
		for _, buf := range d.Buffers {
			Translate(d.Buffers, buf.Base, buf.Length, true)
		}
	})
}
