package pluginclient

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadImageSealsThroughBusy: a kernel that refuses the seals with
// EBUSY a few times (a passing pin on a page) still gets the image
// sealed; one that keeps refusing makes ReadImage fail, saying so, after
// a bounded number of tries.
func TestReadImageSealsThroughBusy(t *testing.T) {
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	real := addSeals
	defer func() { addSeals = real }()

	busy, tries := 2, 0
	addSeals = func(fd uintptr) error {
		tries++
		if busy > 0 {
			busy--
			return unix.EBUSY
		}
		return real(fd)
	}
	im, err := OpenImage(bin)
	if err != nil {
		t.Fatalf("two EBUSY, then the seals: %v", err)
	}
	got, err := unix.FcntlInt(im.mem.Fd(), unix.F_GET_SEALS, 0)
	im.Close()
	if err != nil || got&imageSeals != imageSeals || tries != 3 {
		t.Fatalf("seals %#x (%v) after %d tries, want %#x after 3", got, err, tries, imageSeals)
	}

	tries = 0
	addSeals = func(uintptr) error { tries++; return unix.EBUSY }
	if _, err := OpenImage(bin); !errors.Is(err, unix.EBUSY) || tries < 2 || tries > 12 {
		t.Fatalf("EBUSY for good: %v after %d tries, want EBUSY after a bounded few", err, tries)
	}
}
