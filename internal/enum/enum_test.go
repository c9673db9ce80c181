package enum

import "testing"

type color uint8

const (
	red color = iota + 1
	green
	blue = 5
)

var colorNames = [...]string{red: "red", green: "green", blue: "blue"}

type signed int32

func TestString(t *testing.T) {
	for _, tc := range []struct {
		v    color
		want string
	}{
		{red, "red"},
		{green, "green"},
		{blue, "blue"},
		{0, "color(0)"}, // before the first constant: an empty entry
		{3, "color(3)"}, // a gap in the table
		{6, "color(6)"}, // past the table
		{255, "color(255)"},
	} {
		if got := String(tc.v, colorNames[:], "color"); got != tc.want {
			t.Errorf("String(%d) = %q, want %q", uint8(tc.v), got, tc.want)
		}
	}
	if got := String(signed(-1), []string{"zero"}, "signed"); got != "signed(-1)" {
		t.Errorf("String(-1) = %q, want signed(-1): a negative value must not index the table", got)
	}
	if got := String(signed(0), nil, "signed"); got != "signed(0)" {
		t.Errorf("String with no table = %q, want signed(0)", got)
	}
}

func TestStringAllocatesNothingForKnownValues(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _ = String(green, colorNames[:], "color") }); n != 0 {
		t.Errorf("String of a declared value allocates %v times, want 0", n)
	}
}
