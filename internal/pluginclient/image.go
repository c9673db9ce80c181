package pluginclient

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Image is a plugin binary's bytes exactly as they were hashed: read once,
// through one open descriptor, into a sealed memfd, which is what
// LaunchImage executes. Renaming another file over Path, or rewriting it in
// place, after ReadImage changes nothing that runs, so SHA256 is the hash
// of the code the plugin process runs (runc executes what it hashed the
// same way, after CVE-2019-5736).
type Image struct {
	Path   string   // where the bytes were read from: messages and the plugin's argv[0]
	SHA256 [32]byte // of the bytes in the memfd
	mem    *os.File // sealed against writing, growing and shrinking; close-on-exec
}

// imageSeals leave the memfd's bytes fixed for good: no write, no resize,
// and no removal of the seals.
const imageSeals = unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL

// OpenImage opens the binary at path and reads it with ReadImage.
func OpenImage(path string) (*Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open plugin binary: %w", err)
	}
	defer f.Close()
	return ReadImage(f, path)
}

// ReadImage copies the open binary f into a new sealed memfd, hashing the
// bytes as they are copied. path names f in messages and becomes the
// plugin's argv[0]. The caller owns the Image and closes it once the
// plugin has started (or will not be).
func ReadImage(f *os.File, path string) (*Image, error) {
	mem, err := memfd("ferry-plugin-image")
	if err != nil {
		return nil, fmt.Errorf("copy plugin binary %s into a memfd: %w", path, err)
	}
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(mem, h), f); err != nil {
		mem.Close()
		return nil, fmt.Errorf("copy plugin binary %s into a memfd: %w", path, err)
	}
	if err := seal(mem.Fd()); err != nil {
		mem.Close()
		return nil, fmt.Errorf("seal the memfd holding plugin binary %s: %w", path, err)
	}
	im := &Image{Path: path, mem: mem}
	h.Sum(im.SHA256[:0])
	return im, nil
}

// seal adds imageSeals to the memfd fd. The kernel refuses F_SEAL_WRITE
// with EBUSY while something holds a passing reference to one of the
// memfd's pages (it waits a little for such pins to go, then gives up;
// the kernel's own page scanners, compaction or DAMON's kdamond, take
// them): CI met it once, starting a plugin under the race tests' load.
// Sealing changes nothing when it fails, so seal tries again, waiting 1
// ms, then twice as long each time, for up to half a second in all.
func seal(fd uintptr) error {
	var err error
	for wait := time.Millisecond; ; wait *= 2 {
		if err = addSeals(fd); !errors.Is(err, unix.EBUSY) || wait > sealRetryMax {
			return err
		}
		time.Sleep(wait)
	}
}

// sealRetryMax is the longest wait between two tries of seal.
const sealRetryMax = 256 * time.Millisecond

// addSeals adds imageSeals to fd: a variable so that a test can stand in
// for the kernel's EBUSY.
var addSeals = func(fd uintptr) error {
	_, err := unix.FcntlInt(fd, unix.F_ADD_SEALS, imageSeals)
	return err
}

// memfd creates an executable memfd that can be sealed. MFD_EXEC asks for
// exec permission where vm.memfd_noexec would deny it by default (Linux
// 6.3 and later); older kernels do not know the flag and refuse it with
// EINVAL, and their memfds are executable anyway.
func memfd(name string) (*os.File, error) {
	const flags = unix.MFD_CLOEXEC | unix.MFD_ALLOW_SEALING
	fd, err := unix.MemfdCreate(name, flags|unix.MFD_EXEC)
	if errors.Is(err, unix.EINVAL) {
		fd, err = unix.MemfdCreate(name, flags)
	}
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// Close releases the memfd. A plugin already started from the image keeps
// running: its process holds the bytes it executes.
func (im *Image) Close() error {
	if im == nil || im.mem == nil {
		return nil
	}
	return im.mem.Close()
}
