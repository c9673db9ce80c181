package ring

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/ferrydev/ferry/sdk/shm"
)

// Environment of a re-executed test binary acting as the other process.
const (
	childEnv      = "FERRY_RING_CHILD" // role: "echo" or "count"
	childCountEnv = "FERRY_RING_N"     // descriptors to expect
	childCapEnv   = "FERRY_RING_CAP"   // capacity of each of the two rings
)

// Waiting parameters of the test processes. Every loop that waits also
// has an overall deadline, so that a broken peer fails the test instead
// of hanging it.
const (
	testSpin     = 50 * time.Microsecond
	testSleep    = 10 * time.Millisecond
	testDeadline = 2 * time.Minute
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		if err := childMain(role); err != nil {
			fmt.Fprintf(os.Stderr, "ring child %s: %v\n", role, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// twoRings lays out two rings of capacity slots back to back: a request
// ring (parent produces) and a reply ring (child produces). With a
// capacity of at least 64 both start on a page boundary.
func twoRings(mem []byte, capacity int) (req, rep []byte) {
	n := Size(capacity)
	return mem[:n], mem[n : 2*n]
}

// childMain runs in the child process. Fd 3 is the memfd that holds both
// rings, already initialised by the parent.
func childMain(role string) error {
	n, err := strconv.Atoi(os.Getenv(childCountEnv))
	if err != nil {
		return err
	}
	capacity, err := strconv.Atoi(os.Getenv(childCapEnv))
	if err != nil {
		return err
	}
	m, err := shm.Map(3, 0, 2*Size(capacity), true)
	if err != nil {
		return err
	}
	defer m.Close()
	unix.Close(3)
	reqMem, repMem := twoRings(m.Mem(), capacity)
	req, err := Attach(reqMem)
	if err != nil {
		return err
	}
	rep, err := Attach(repMem)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(testDeadline)
	push := func(d *Descriptor) error {
		for !rep.Enqueue(d) {
			if !rep.WaitSpace(testSpin, testSleep) && time.Now().After(deadline) {
				return errors.New("parent stopped draining replies")
			}
		}
		return nil
	}
	if role == "count" {
		// Tell the parent we are ready, so that its clock starts now.
		if err := push(&Descriptor{Token: 0, Op: OpNop}); err != nil {
			return err
		}
		rep.Publish()
	}
	var buf [64]Descriptor
	for next := 0; next < n; {
		k := req.Dequeue(buf[:])
		if k == 0 {
			if err := req.Err(); err != nil {
				return err
			}
			if !req.Wait(testSpin, testSleep) && time.Now().After(deadline) {
				return fmt.Errorf("timed out after %d of %d descriptors", next, n)
			}
			continue
		}
		for i := range k {
			d := &buf[i]
			switch {
			case role == "echo":
				if err := checkRequest(d, uint64(next)); err != nil {
					return err
				}
			case d.Token != uint64(next): // the benchmark only numbers them
				return fmt.Errorf("token %d, want %d", d.Token, next)
			}
			next++
			if role == "echo" {
				d.Op, d.Status = OpCompletion, StatusOK
				if err := push(d); err != nil {
					return err
				}
			}
		}
		rep.Publish()
	}
	if role == "count" {
		if err := push(&Descriptor{Token: uint64(n), Op: OpCompletion}); err != nil {
			return err
		}
		rep.Publish()
	}
	return nil
}

// request is the descriptor number seq of a test stream: every field is
// derived from seq, so that a torn or misplaced slot shows.
func request(seq uint64) Descriptor {
	return Descriptor{
		Token:        seq,
		Op:           OpWrite,
		Prio:         uint8(seq),
		Rail:         uint16(seq >> 8),
		LocalRegion:  uint32(seq * 3),
		Peer:         uint32(seq >> 3),
		LocalOffset:  seq * 4096,
		RemoteRegion: ^uint32(seq),
		Flags:        uint32(seq * 7),
		RemoteOffset: ^seq,
		Length:       seq + 1,
		Deadline:     int64(seq) * 1000,
	}
}

func checkRequest(d *Descriptor, seq uint64) error {
	want := request(seq)
	if *d != want {
		return fmt.Errorf("descriptor %d: got %+v, want %+v", seq, *d, want)
	}
	return nil
}

func checkReply(d *Descriptor, seq uint64) error {
	want := request(seq)
	want.Op, want.Status = OpCompletion, StatusOK
	if *d != want {
		return fmt.Errorf("reply %d: got %+v, want %+v", seq, *d, want)
	}
	return nil
}

// child is a re-executed test binary sharing two rings with this process.
type child struct {
	region   *shm.Region
	req, rep *Ring
	cmd      *exec.Cmd
	exited   chan struct{} // closed once cmd.Wait returned
	err      error         // what cmd.Wait returned
}

// startChild creates two rings of capacity slots in a sealed memfd and
// starts a child in role that expects n descriptors.
func startChild(tb testing.TB, role string, capacity, n int) *child {
	tb.Helper()
	region, err := shm.Create("ring-test", 2*Size(capacity))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { region.Close() })
	reqMem, repMem := twoRings(region.Mem(), capacity)
	req, err := Init(reqMem, capacity)
	if err != nil {
		tb.Fatal(err)
	}
	rep, err := Init(repMem, capacity)
	if err != nil {
		tb.Fatal(err)
	}
	// ExtraFiles needs an *os.File; give it a duplicate so that the
	// File's finalizer can never close the region's own fd.
	dup, err := unix.Dup(region.FD())
	if err != nil {
		tb.Fatal(err)
	}
	f := os.NewFile(uintptr(dup), "ring-memfd")
	defer f.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^$")
	cmd.Env = append(os.Environ(),
		childEnv+"="+role,
		childCountEnv+"="+strconv.Itoa(n),
		childCapEnv+"="+strconv.Itoa(capacity))
	cmd.ExtraFiles = []*os.File{f}
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &child{region: region, req: req, rep: rep, cmd: cmd, exited: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		close(c.exited)
	}()
	tb.Cleanup(func() {
		select {
		case <-c.exited:
		default:
			cmd.Process.Kill()
			<-c.exited
		}
	})
	return c
}

// wait ends when the child exits and returns its error.
func (c *child) wait() error {
	<-c.exited
	return c.err
}
