package shm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// childEnv selects a child role when the test binary re-executes itself.
const childEnv = "FERRY_SHM_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(childMain(role))
	}
	goleak.VerifyTestMain(m)
}

// childMain runs in a re-executed test binary. Fd 3 is the child end of a
// socketpair. It returns the exit code; failures are printed to stderr.
func childMain(role string) int {
	err := func() error {
		switch role {
		case "write-pattern":
			return childWritePattern()
		default:
			return fmt.Errorf("unknown child role %q", role)
		}
	}()
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", role, err)
		return 1
	}
	return 0
}

// childWritePattern takes message 7 (one memfd), maps it and writes
// pattern(i) at every byte, then maps the same file read-only at an
// unaligned offset and checks that it sees the same bytes.
func childWritePattern() error {
	rx, err := NewFDReceiver(os.NewFile(3, "fd-socket"))
	if err != nil {
		return err
	}
	defer rx.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fds, err := rx.Take(ctx, 7)
	if err != nil {
		return err
	}
	if len(fds) != 1 {
		return fmt.Errorf("got %d fds, want 1", len(fds))
	}
	defer closeFDs(fds)
	size := testRegionSize
	m, err := Map(fds[0], 0, size, true)
	if err != nil {
		return err
	}
	defer m.Close()
	mem := m.Mem()
	for i := range mem {
		mem[i] = pattern(i)
	}
	const off = 4096 + 123
	ro, err := Map(fds[0], off, size-off, false)
	if err != nil {
		return err
	}
	defer ro.Close()
	for i, b := range ro.Mem() {
		if b != pattern(off+i) {
			return fmt.Errorf("read-only view at %d: %#x, want %#x", off+i, b, pattern(off+i))
		}
	}
	return nil
}

const testRegionSize = 3*4096 + 17

func pattern(i int) byte { return byte(i*7 + i>>8) }

// startChild re-executes the test binary in role, giving it child as fd 3.
func startChild(t *testing.T, role string, child *os.File) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.ExtraFiles = []*os.File{child}
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}
