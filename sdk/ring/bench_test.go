package ring

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// Benchmark waits: spin briefly, then sleep; the deadline only stops a
// broken run.
const (
	benchSpin  = 50 * time.Microsecond
	benchSleep = 10 * time.Millisecond
	benchBatch = 32
)

// BenchmarkEnqueueDequeue is one goroutine playing both sides: the cost of
// the ring itself, without cache-line transfers between cores.
func BenchmarkEnqueueDequeue(b *testing.B) {
	for _, batch := range []int{1, benchBatch} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			prod, cons, _ := newPair(b, 1024)
			d := request(1)
			out := make([]Descriptor, batch)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i += batch {
				for range batch {
					prod.Enqueue(&d)
				}
				prod.Publish()
				if cons.Dequeue(out) != batch {
					b.Fatal("short dequeue")
				}
			}
		})
	}
}

// produce enqueues n descriptors in batches of benchBatch, publishing each
// batch, and waits for room when the ring is full.
func produce(r *Ring, n int) error {
	deadline := time.Now().Add(testDeadline)
	d := request(0)
	for seq := 0; seq < n; {
		for i := 0; i < benchBatch && seq < n; i++ {
			d.Token = uint64(seq)
			if !r.Enqueue(&d) {
				if !r.WaitSpace(benchSpin, benchSleep) && time.Now().After(deadline) {
					return fmt.Errorf("producer timed out at %d of %d", seq, n)
				}
				break
			}
			seq++
		}
		r.Publish()
	}
	return nil
}

// BenchmarkRingSingleProcess runs a producer goroutine and a consumer
// goroutine in this process (batches of 32 per Publish, reads of up to
// 64) and reports descriptors per second.
func BenchmarkRingSingleProcess(b *testing.B) {
	prod, cons, _ := newPair(b, 1024)
	errc := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() { errc <- produce(prod, b.N) }()
	var out [64]Descriptor
	deadline := time.Now().Add(testDeadline)
	for seq := 0; seq < b.N; {
		k := cons.Dequeue(out[:])
		if k == 0 {
			if !cons.Wait(benchSpin, benchSleep) && time.Now().After(deadline) {
				b.Fatalf("consumer timed out at %d of %d", seq, b.N)
			}
			continue
		}
		if out[k-1].Token != uint64(seq+k-1) {
			b.Fatalf("token %d, want %d", out[k-1].Token, seq+k-1)
		}
		seq += k
	}
	el := time.Since(start)
	b.StopTimer()
	if err := <-errc; err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "desc/s")
}

// BenchmarkRingCrossProcess produces into a ring that a child process
// drains (checking order) and reports descriptors per second, from the
// child's ready signal to its count.
func BenchmarkRingCrossProcess(b *testing.B) {
	c := startChild(b, "count", 1024, b.N)
	var out [1]Descriptor
	await := func(what string) Descriptor {
		deadline := time.Now().Add(testDeadline)
		for c.rep.Dequeue(out[:]) == 0 {
			select {
			case <-c.exited:
				b.Fatalf("child exited before %s: %v", what, c.err)
			default:
			}
			if !c.rep.Wait(benchSpin, benchSleep) && time.Now().After(deadline) {
				b.Fatalf("timed out waiting for %s", what)
			}
		}
		return out[0]
	}
	await("ready")
	b.ResetTimer()
	start := time.Now()
	if err := produce(c.req, b.N); err != nil {
		b.Fatal(err)
	}
	done := await("count")
	el := time.Since(start)
	b.StopTimer()
	if done.Token != uint64(b.N) {
		b.Fatalf("child counted %d, want %d", done.Token, b.N)
	}
	if err := c.wait(); err != nil {
		b.Fatalf("child: %v", err)
	}
	b.ReportMetric(float64(b.N)/el.Seconds(), "desc/s")
}

// BenchmarkRingRoundTrip is a request and its answer between two threads
// of this process, one descriptor at a time: a request ring and an answer
// ring, each side spinning in Wait (as a host's waiter and a plugin's lane
// do while traffic flows). ns/op is one round trip: two one-way handoffs
// of a descriptor between cores.
func BenchmarkRingRoundTrip(b *testing.B) {
	req, reqC, _ := newPair(b, 1024)
	ans, ansC, _ := newPair(b, 1024)
	const spin, sleep = time.Second, 10 * time.Millisecond
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		reqC.SetSpinGosched(spin)
		var in [1]Descriptor
		for {
			if !reqC.Wait(spin, sleep) {
				continue
			}
			reqC.Dequeue(in[:])
			if in[0].Op == OpNop {
				return
			}
			in[0].Op = OpCompletion
			for !ans.Push(&in[0]) {
			}
		}
	}()
	d := request(0)
	// The echo ends at a NOP, whether the loop below ends or fails.
	defer func() {
		d.Op = OpNop
		req.Push(&d)
		<-done
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	ansC.SetSpinGosched(spin)
	var out [1]Descriptor
	b.ResetTimer()
	for i := range b.N {
		d.Token = uint64(i)
		req.Push(&d)
		for !ansC.Wait(spin, sleep) {
		}
		if ansC.Dequeue(out[:]) != 1 || out[0].Token != uint64(i) {
			b.Fatalf("answer %d: token %d", i, out[0].Token)
		}
	}
	b.StopTimer()
}

// BenchmarkLinePingPong is the floor under BenchmarkRingRoundTrip: one
// word each way between the same two threads, each on a cache line of its
// own, no ring. On a 2-vCPU AMD EPYC KVM guest (2026-12-05) it was
// 940-967 ns and the ring's round trip 1006-1026 ns: the ring adds about
// 60 ns to what moving a line from core to core and back costs there.
func BenchmarkLinePingPong(b *testing.B) {
	type line struct {
		v atomic.Uint64
		_ [120]byte
	}
	var ping, pong line
	n := uint64(b.N)
	go func() {
		runtime.LockOSThread()
		for i := uint64(1); i <= n; i++ {
			for ping.v.Load() != i {
			}
			pong.v.Store(i)
		}
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ResetTimer()
	for i := uint64(1); i <= n; i++ {
		ping.v.Store(i)
		for pong.v.Load() != i {
		}
	}
}
