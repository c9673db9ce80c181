package shm

import (
	"bytes"
	"context"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// pair returns a sender and receiver joined by a socketpair.
func pair(t *testing.T) (*FDSender, *FDReceiver) {
	t.Helper()
	h, c, err := Socketpair()
	if err != nil {
		t.Fatal(err)
	}
	tx, err := NewFDSender(h)
	if err != nil {
		t.Fatal(err)
	}
	rx, err := NewFDReceiver(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		tx.Close()
		rx.Close()
	})
	return tx, rx
}

// rawPair returns the host end as a raw fd, for sending malformed
// messages, and a receiver on the other end built with maxPending.
func rawPair(t *testing.T, maxPending int) (int, *FDReceiver) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	rx, err := newFDReceiver(os.NewFile(uintptr(fds[1]), "child"), maxPending)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Close(fds[0])
		rx.Close()
	})
	return fds[0], rx
}

// pipe returns a pipe whose read end does not block.
func pipe(t *testing.T) (r, w int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(p[0]) })
	return p[0], p[1]
}

// writerClosed reports whether every copy of the pipe's write end is
// closed: a read then returns EOF instead of EAGAIN.
func writerClosed(t *testing.T, r int) bool {
	t.Helper()
	var b [1]byte
	n, err := unix.Read(r, b[:])
	switch {
	case err == nil && n == 0:
		return true
	case errors.Is(err, unix.EAGAIN):
		return false
	}
	t.Fatalf("read from pipe: n=%d err=%v", n, err)
	return false
}

func sameFile(t *testing.T, a, b int) bool {
	t.Helper()
	var sa, sb unix.Stat_t
	if err := unix.Fstat(a, &sa); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fstat(b, &sb); err != nil {
		t.Fatal(err)
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

func TestFDRoundTrip(t *testing.T) {
	tx, rx := pair(t)
	region, err := Create("roundtrip", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer region.Close()
	r, w := pipe(t)
	defer unix.Close(w)
	if err := tx.Send(42, region.FD(), w); err != nil {
		t.Fatal(err)
	}
	fds, err := rx.Take(context.Background(), 42)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFDs(fds)
	if len(fds) != 2 {
		t.Fatalf("got %d fds, want 2", len(fds))
	}
	if !sameFile(t, fds[0], region.FD()) || !sameFile(t, fds[1], w) {
		t.Fatal("received fds are not the files sent")
	}
	if fds[0] == region.FD() || fds[1] == w {
		t.Fatal("received fds are the sender's numbers, not copies")
	}
	flags, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0)
	if err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("received fd is not close-on-exec (flags %#x, %v)", flags, err)
	}
	if _, err := unix.Write(fds[1], []byte("hi")); err != nil {
		t.Fatal(err)
	}
	var b [2]byte
	if _, err := unix.Read(r, b[:]); err != nil || string(b[:]) != "hi" {
		t.Fatalf("read %q, %v", b, err)
	}
	// A message without fds is allowed.
	if err := tx.Send(43); err != nil {
		t.Fatal(err)
	}
	if fds, err := rx.Take(context.Background(), 43); err != nil || len(fds) != 0 {
		t.Fatalf("Take(43) = %v, %v", fds, err)
	}
	if n, _ := rx.Rejected(); n != 0 {
		t.Fatalf("%d messages rejected", n)
	}
}

func TestTakeBeforeArrival(t *testing.T) {
	tx, rx := pair(t)
	waiting := make(chan uint64, 1)
	rx.onWait = func(id uint64) { waiting <- id }
	_, w := pipe(t)
	defer unix.Close(w)
	type result struct {
		fds []int
		err error
	}
	got := make(chan result, 1)
	go func() {
		fds, err := rx.Take(context.Background(), 9)
		got <- result{fds, err}
	}()
	if id := <-waiting; id != 9 {
		t.Fatalf("waiting for %d", id)
	}
	if err := tx.Send(9, w); err != nil {
		t.Fatal(err)
	}
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	defer closeFDs(res.fds)
	if len(res.fds) != 1 || !sameFile(t, res.fds[0], w) {
		t.Fatalf("got fds %v", res.fds)
	}
}

func TestTakeAfterArrival(t *testing.T) {
	tx, rx := pair(t)
	_, w1 := pipe(t)
	_, w2 := pipe(t)
	defer unix.Close(w1)
	defer unix.Close(w2)
	if err := tx.Send(1, w1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Send(2, w2); err != nil {
		t.Fatal(err)
	}
	// Messages are read in order: once 2 is here, 1 is waiting in the map.
	fds2, err := rx.Take(context.Background(), 2)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFDs(fds2)
	rx.mu.Lock()
	_, filed := rx.pending[1]
	rx.mu.Unlock()
	if !filed {
		t.Fatal("message 1 is not pending")
	}
	fds1, err := rx.Take(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFDs(fds1)
	if !sameFile(t, fds1[0], w1) || !sameFile(t, fds2[0], w2) {
		t.Fatal("fds filed under the wrong ids")
	}
}

func TestTakeCanceled(t *testing.T) {
	tx, rx := pair(t)
	ctx, cancel := context.WithCancel(context.Background())
	rx.onWait = func(uint64) { cancel() }
	if _, err := rx.Take(ctx, 5); !errors.Is(err, context.Canceled) {
		t.Fatalf("Take: %v, want context.Canceled", err)
	}
	rx.onWait = nil
	// The message arrives later and waits for the next Take.
	_, w := pipe(t)
	defer unix.Close(w)
	if err := tx.Send(5, w); err != nil {
		t.Fatal(err)
	}
	fds, err := rx.Take(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	closeFDs(fds)
}

func TestTakeTwiceForOneID(t *testing.T) {
	_, rx := pair(t)
	waiting := make(chan struct{})
	rx.onWait = func(uint64) { close(waiting) }
	first := make(chan error, 1)
	go func() {
		_, err := rx.Take(context.Background(), 3)
		first <- err
	}()
	<-waiting
	if _, err := rx.Take(context.Background(), 3); err == nil {
		t.Fatal("second Take for the same id succeeded")
	}
	rx.Close()
	if err := <-first; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting Take after Close: %v, want ErrClosed", err)
	}
}

func TestDoneWhenPeerCloses(t *testing.T) {
	tx, rx := pair(t)
	_, w := pipe(t)
	defer unix.Close(w)
	if err := tx.Send(1, w); err != nil {
		t.Fatal(err)
	}
	select {
	case <-rx.Done():
		t.Fatal("Done before the peer closed")
	default:
	}
	if err := rx.Err(); err != nil {
		t.Fatalf("Err while running: %v", err)
	}
	waiting := make(chan struct{})
	rx.onWait = func(uint64) { close(waiting) }
	blocked := make(chan error, 1)
	go func() {
		_, err := rx.Take(context.Background(), 2)
		blocked <- err
	}()
	<-waiting
	if err := tx.Close(); err != nil {
		t.Fatal(err)
	}
	<-rx.Done()
	if err := rx.Err(); !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("Err: %v, want ErrPeerClosed", err)
	}
	if err := <-blocked; !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("waiting Take: %v, want ErrPeerClosed", err)
	}
	rx.onWait = nil
	// What arrived before the end can still be taken.
	fds, err := rx.Take(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	closeFDs(fds)
	if _, err := rx.Take(context.Background(), 3); !errors.Is(err, ErrPeerClosed) {
		t.Fatalf("Take after EOF: %v, want ErrPeerClosed", err)
	}
	if err := tx.Send(4); !errors.Is(err, ErrClosed) {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
}

func TestCloseClosesPendingFDs(t *testing.T) {
	tx, rx := pair(t)
	r, w := pipe(t)
	if err := tx.Send(1, w); err != nil {
		t.Fatal(err)
	}
	unix.Close(w)
	if err := tx.Send(2); err != nil {
		t.Fatal(err)
	}
	if _, err := rx.Take(context.Background(), 2); err != nil { // 1 is filed by now
		t.Fatal(err)
	}
	if writerClosed(t, r) {
		t.Fatal("pending fd closed before Close")
	}
	if err := rx.Close(); err != nil {
		t.Fatal(err)
	}
	if !writerClosed(t, r) {
		t.Fatal("Close left an unclaimed fd open")
	}
	if err := rx.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !errors.Is(rx.Err(), ErrClosed) {
		t.Fatalf("Err after Close: %v", rx.Err())
	}
	if _, err := rx.Take(context.Background(), 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Take after Close: %v", err)
	}
}

// TestRejectsMalformed sends bad messages with fds attached, each followed
// by a good one; once the good one is taken, the bad one was handled and
// its fds must be closed.
func TestRejectsMalformed(t *testing.T) {
	host, rx := rawPair(t, MaxPending)
	hdr := func(magic uint32, version uint16, nfds uint16, id uint64) []byte {
		var b [HeaderSize]byte
		encodeHeader(&b, id, int(nfds))
		b[0], b[1], b[2], b[3] = byte(magic), byte(magic>>8), byte(magic>>16), byte(magic>>24)
		b[4], b[5] = byte(version), byte(version>>8)
		return b[:]
	}
	for i, tc := range []struct {
		name string
		data []byte
		nfds int // copies of the pipe's write end to attach
	}{
		{"short", hdr(headerMagic, headerVersion, 1, 100)[:8], 1},
		{"long", append(hdr(headerMagic, headerVersion, 1, 100), 0), 1},
		{"bad magic", hdr(0xdeadbeef, headerVersion, 1, 100), 1},
		{"bad version", hdr(headerMagic, 2, 1, 100), 1},
		{"fewer fds than announced", hdr(headerMagic, headerVersion, 2, 100), 1},
		{"more fds than announced", hdr(headerMagic, headerVersion, 1, 100), 2},
		{"announces too many", hdr(headerMagic, headerVersion, MaxFDs+1, 100), 1},
		{"too many fds (control truncated)", hdr(headerMagic, headerVersion, MaxFDs+1, 100), MaxFDs + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, w := pipe(t)
			fds := make([]int, tc.nfds)
			for j := range fds {
				fds[j] = w
			}
			if err := unix.Sendmsg(host, tc.data, unix.UnixRights(fds...), nil, 0); err != nil {
				t.Fatal(err)
			}
			unix.Close(w)
			good := uint64(1000 + i)
			if err := unix.Sendmsg(host, hdr(headerMagic, headerVersion, 0, good), nil, nil, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := rx.Take(context.Background(), good); err != nil {
				t.Fatal(err)
			}
			if !writerClosed(t, r) {
				t.Fatal("fds of a rejected message left open")
			}
			n, last := rx.Rejected()
			if n != uint64(i+1) || !errors.Is(last, ErrBadMessage) {
				t.Fatalf("Rejected() = %d, %v", n, last)
			}
			t.Log(last)
			rx.mu.Lock()
			_, filed := rx.pending[100]
			rx.mu.Unlock()
			if filed {
				t.Fatal("a rejected message was filed")
			}
		})
	}
}

func TestRejectsRepeatedID(t *testing.T) {
	tx, rx := pair(t)
	r1, w1 := pipe(t)
	r2, w2 := pipe(t)
	for _, w := range []int{w1, w2} {
		if err := tx.Send(5, w); err != nil {
			t.Fatal(err)
		}
		unix.Close(w)
	}
	if err := tx.Send(6); err != nil {
		t.Fatal(err)
	}
	if _, err := rx.Take(context.Background(), 6); err != nil {
		t.Fatal(err)
	}
	if writerClosed(t, r1) || !writerClosed(t, r2) {
		t.Fatal("want the first message 5 kept and the second rejected")
	}
	fds, err := rx.Take(context.Background(), 5)
	if err != nil {
		t.Fatal(err)
	}
	closeFDs(fds)
	if !writerClosed(t, r1) {
		t.Fatal("taken fd is not the first message's")
	}
}

func TestPendingLimit(t *testing.T) {
	host, rx := rawPair(t, 2)
	send := func(id uint64, fds ...int) {
		t.Helper()
		var b [HeaderSize]byte
		encodeHeader(&b, id, len(fds))
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		if err := unix.Sendmsg(host, b[:], oob, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	waiting := make(chan struct{})
	rx.onWait = func(uint64) { close(waiting) }
	got := make(chan error, 1)
	go func() {
		_, err := rx.Take(context.Background(), 4)
		got <- err
	}()
	<-waiting
	r, w := pipe(t)
	send(1)
	send(2)
	send(3, w) // over the limit
	unix.Close(w)
	send(4) // a waiting Take is served even when the map is full
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if !writerClosed(t, r) {
		t.Fatal("fds of the message over the limit left open")
	}
	if n, last := rx.Rejected(); n != 1 || !errors.Is(last, ErrBadMessage) {
		t.Fatalf("Rejected() = %d, %v", n, last)
	}
}

func TestSendLimits(t *testing.T) {
	tx, _ := pair(t)
	fds := make([]int, MaxFDs+1)
	if err := tx.Send(1, fds...); err == nil {
		t.Fatal("sent more than MaxFDs")
	}
	if err := tx.Send(1, -1); err == nil {
		t.Fatal("sent fd -1")
	}
}

func TestNewRefusesOtherSockets(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewFDSender(os.NewFile(uintptr(fds[0]), "stream")); err == nil {
		t.Fatal("NewFDSender accepted a stream socket")
	}
	if _, err := NewFDReceiver(os.NewFile(uintptr(fds[1]), "stream")); err == nil {
		t.Fatal("NewFDReceiver accepted a stream socket")
	}
	// Both files were taken and closed, also on error.
	if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_GETFD, 0); !errors.Is(err, unix.EBADF) {
		t.Fatalf("fd %d still open: %v", fds[0], err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pw.Close()
	if _, err := NewFDReceiver(pr); err == nil {
		t.Fatal("NewFDReceiver accepted a pipe")
	}
}

func FuzzDecodeHeader(f *testing.F) {
	var good [HeaderSize]byte
	encodeHeader(&good, 0x0102030405060708, 3)
	f.Add(good[:])
	f.Add(good[:8])
	f.Add(append(good[:], 0))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, nfds, err := decodeHeader(b)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if nfds < 0 || nfds > MaxFDs {
			t.Fatalf("accepted nfds %d", nfds)
		}
		var again [HeaderSize]byte
		encodeHeader(&again, id, nfds)
		if !bytes.Equal(again[:], b) {
			t.Fatalf("decode(%x) = %d, %d; encodes back to %x", b, id, nfds, again)
		}
	})
}
