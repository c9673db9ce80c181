package progress

import "testing"

// TestSizeClass checks the size classes of every capacity: a class's
// size takes every capacity of the class and at most a quarter more than
// it asks (64 below 64), classes rise with the capacity and stay below
// classes, and a batch allocated at its class's size is put back into
// the same class.
func TestSizeClass(t *testing.T) {
	last := -1
	for n := 1; n <= MaxTasks; n++ {
		c, size := SizeClass(n)
		if c < 0 || c >= classes {
			t.Fatalf("SizeClass(%d) = class %d, outside 0..%d", n, c, classes-1)
		}
		if size < n || (n > 64 && 4*size > 5*n+4) || (n <= 64 && size != 64) {
			t.Fatalf("SizeClass(%d) = size %d: want n <= size <= 1.25n (64 up to 64)", n, size)
		}
		if c < last || c > last+1 {
			t.Fatalf("SizeClass(%d) = class %d after class %d: classes rise one at a time", n, c, last)
		}
		last = c
		if c2, s2 := SizeClass(size); c2 != c || s2 != size {
			t.Fatalf("SizeClass(%d) = (%d, %d), but its size %d is in (%d, %d)", n, c, size, size, c2, s2)
		}
	}
	if last != classes-1 {
		t.Fatalf("the last class is %d, want %d", last, classes-1)
	}
}
