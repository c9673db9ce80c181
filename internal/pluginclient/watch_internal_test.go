package pluginclient

import (
	"os/exec"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A poll of the pidfd that a signal interrupts (EINTR) is not the
// process's exit: watch polls again, Exited stays open while the process
// runs, and closes when it ends.
func TestWatchRetriesInterruptedPoll(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()

	polls := make(chan error, 16)
	var interrupted atomic.Bool
	pollPidfd = func(fds []unix.PollFd, timeout int) (int, error) {
		if !interrupted.Swap(true) {
			polls <- unix.EINTR
			return 0, unix.EINTR
		}
		n, err := unix.Poll(fds, timeout)
		select {
		case polls <- err:
		default:
		}
		return n, err
	}
	defer func() { pollPidfd = unix.Poll }()

	p := &lifecycle{run: &cmdRunner{pid: cmd.Process.Pid}, exited: make(chan struct{}), stopped: make(chan struct{})}
	if p.pidf = p.pidfd(); p.pidf == nil {
		t.Fatal("no pidfd for a running child: this kernel lacks pidfd_open (Linux >= 5.3 is required here)")
	}
	go p.watch()

	timeout := time.After(10 * time.Second)
	for i := range 2 {
		select {
		case <-polls:
		case <-p.exited:
			t.Fatalf("poll %d: watch reported the running plugin exited after an interrupted poll", i+1)
		case <-timeout:
			t.Fatalf("watch did not poll the pidfd again after EINTR (%d polls seen)", i)
		}
	}
	select {
	case <-p.exited:
		t.Fatal("watch reported the running plugin exited after an interrupted poll")
	default:
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.exited:
	case <-timeout:
		t.Fatal("watch did not see the killed process exit")
	}
}
