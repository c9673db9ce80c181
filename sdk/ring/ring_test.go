package ring

import (
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// newPair makes a ring of capacity slots in ordinary memory and returns
// the creator's handle (used as producer) and an attached handle (used as
// consumer), as two processes would hold them.
func newPair(t testing.TB, capacity int) (prod, cons *Ring, mem []byte) {
	t.Helper()
	mem = make([]byte, Size(capacity))
	prod, err := Init(mem, capacity)
	if err != nil {
		t.Fatal(err)
	}
	cons, err = Attach(mem)
	if err != nil {
		t.Fatal(err)
	}
	return prod, cons, mem
}

func TestSize(t *testing.T) {
	if got := Size(2); got != 4096+128 {
		t.Fatalf("Size(2) = %d", got)
	}
	if got := Size(1024); got != 4096+65536 {
		t.Fatalf("Size(1024) = %d", got)
	}
	for _, c := range []int{-2, 0, 1, 3, 1000, 2 * MaxCapacity} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Size(%d) did not panic", c)
				}
			}()
			Size(c)
		}()
	}
}

func TestInitRejects(t *testing.T) {
	mem := make([]byte, Size(8)+8)
	for _, tc := range []struct {
		name     string
		mem      []byte
		capacity int
	}{
		{"capacity not a power of two", mem, 6},
		{"capacity one", mem, 1},
		{"negative capacity", mem, -8},
		{"memory too small", mem[:Size(8)-1], 8},
		{"misaligned", mem[1 : Size(8)+1], 8},
	} {
		if _, err := Init(tc.mem, tc.capacity); err == nil {
			t.Errorf("%s: Init succeeded", tc.name)
		}
	}
	if _, err := Init(mem, 8); err != nil {
		t.Fatal(err)
	}
}

func TestAttachRejects(t *testing.T) {
	const capacity = 16
	fresh := func() []byte {
		mem := make([]byte, Size(capacity))
		if _, err := Init(mem, capacity); err != nil {
			t.Fatal(err)
		}
		return mem
	}
	put32 := func(off int, v uint32) func([]byte) []byte {
		return func(m []byte) []byte { binary.LittleEndian.PutUint32(m[off:], v); return m }
	}
	put64 := func(off int, v uint64) func([]byte) []byte {
		return func(m []byte) []byte { binary.LittleEndian.PutUint64(m[off:], v); return m }
	}
	for _, tc := range []struct {
		name   string
		mutate func([]byte) []byte
		want   error
	}{
		{"zeroed memory", func(m []byte) []byte { clear(m); return m }, ErrBadHeader},
		{"bad magic", put64(offMagic, 0x1234), ErrBadHeader},
		{"other layout version", put32(offVersion, LayoutVersion+1), ErrBadHeader},
		{"other slot size", put32(offSlotSize, 128), ErrBadHeader},
		{"capacity zero", put64(offCapacity, 0), ErrBadHeader},
		{"capacity not a power of two", put64(offCapacity, 12), ErrBadHeader},
		{"capacity beyond memory", put64(offCapacity, 32), ErrBadHeader},
		{"capacity huge", put64(offCapacity, 1<<62), ErrBadHeader},
		{"memory shorter than the slots", func(m []byte) []byte { return m[:len(m)-1] }, ErrBadHeader},
		{"memory shorter than the header", func(m []byte) []byte { return m[:100] }, ErrBadHeader},
		{"tail behind head", put64(offHead, 5), ErrCorrupt},
		{"tail beyond head+cap", put64(offTail, capacity+1), ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Attach(tc.mutate(fresh()))
			if err == nil {
				t.Fatalf("Attach succeeded, cap %d", r.Cap())
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			t.Log(err)
		})
	}
	r, err := Attach(fresh())
	if err != nil {
		t.Fatal(err)
	}
	if r.Cap() != capacity {
		t.Fatalf("Cap() = %d", r.Cap())
	}
	// Memory larger than needed is fine (a mapping rounded to pages).
	big := make([]byte, Size(capacity)+4096)
	copy(big, fresh())
	if _, err := Attach(big); err != nil {
		t.Fatal(err)
	}
}

// TestAttachMidStream attaches to a ring that already carries data: the
// new handle continues from the indices in the header.
func TestAttachMidStream(t *testing.T) {
	prod, cons, mem := newPair(t, 8)
	for i := range 5 {
		d := request(uint64(i))
		prod.Push(&d)
	}
	var out [2]Descriptor
	if n := cons.Dequeue(out[:]); n != 2 {
		t.Fatalf("Dequeue = %d", n)
	}
	late, err := Attach(mem)
	if err != nil {
		t.Fatal(err)
	}
	if late.Len() != 3 {
		t.Fatalf("Len() = %d, want 3", late.Len())
	}
	var rest [8]Descriptor
	if n := late.Dequeue(rest[:]); n != 3 {
		t.Fatalf("Dequeue = %d, want 3", n)
	}
	for i := range 3 {
		if err := checkRequest(&rest[i], uint64(i+2)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestWrapAround(t *testing.T) {
	const capacity = 4
	prod, cons, _ := newPair(t, capacity)
	var out [3]Descriptor
	sent, got := uint64(0), uint64(0)
	// Batches of 1..4 against reads of up to 3 wrap the ring many times at
	// every phase.
	for round := range 200 {
		for range round%capacity + 1 {
			d := request(sent)
			if !prod.Enqueue(&d) {
				break
			}
			sent++
		}
		prod.Publish()
		for {
			n := cons.Dequeue(out[:])
			if n == 0 {
				break
			}
			for i := range n {
				if err := checkRequest(&out[i], got); err != nil {
					t.Fatal(err)
				}
				got++
			}
		}
		if got != sent {
			t.Fatalf("round %d: got %d of %d", round, got, sent)
		}
	}
	if sent < 100*capacity {
		t.Fatalf("only %d descriptors went round", sent)
	}
}

func TestFull(t *testing.T) {
	const capacity = 8
	prod, cons, _ := newPair(t, capacity)
	if prod.Free() != capacity || cons.Len() != 0 {
		t.Fatalf("empty ring: Free %d Len %d", prod.Free(), cons.Len())
	}
	for i := range capacity {
		d := request(uint64(i))
		if !prod.Enqueue(&d) {
			t.Fatalf("Enqueue %d refused", i)
		}
	}
	d := request(capacity)
	if prod.Enqueue(&d) || prod.Push(&d) {
		t.Fatal("Enqueue into a full ring succeeded")
	}
	if prod.Free() != 0 {
		t.Fatalf("Free() = %d", prod.Free())
	}
	var out [capacity]Descriptor
	if n := cons.Dequeue(out[:]); n != 0 || cons.Len() != 0 {
		t.Fatalf("unpublished slots visible: Dequeue %d Len %d", n, cons.Len())
	}
	if cons.Wait(0, 0) {
		t.Fatal("Wait saw unpublished slots")
	}
	prod.Publish()
	if cons.Len() != capacity {
		t.Fatalf("Len() = %d", cons.Len())
	}
	if n := cons.Dequeue(out[:3]); n != 3 {
		t.Fatalf("Dequeue = %d", n)
	}
	if prod.Free() != 3 {
		t.Fatalf("Free() = %d after freeing 3", prod.Free())
	}
	if !prod.Push(&d) {
		t.Fatal("Push after freeing refused")
	}
	if n := cons.Dequeue(out[:]); n != 6 {
		t.Fatalf("Dequeue = %d, want 6", n)
	}
	for i := range 6 {
		if err := checkRequest(&out[i], uint64(i+3)); err != nil {
			t.Fatal(err)
		}
	}
	if n := cons.Dequeue(nil); n != 0 {
		t.Fatalf("Dequeue(nil) = %d", n)
	}
}

func TestCorruptTail(t *testing.T) {
	for _, tc := range []struct {
		name string
		tail func(old uint64) uint64
	}{
		{"beyond head+cap", func(old uint64) uint64 { return old + 9 }},
		{"backwards", func(old uint64) uint64 { return old - 1 }},
		{"huge", func(uint64) uint64 { return ^uint64(0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prod, cons, mem := newPair(t, 8)
			for i := range 3 {
				d := request(uint64(i))
				prod.Push(&d)
			}
			if cons.Len() != 3 {
				t.Fatal("Len before corruption")
			}
			binary.NativeEndian.PutUint64(mem[offTail:], tc.tail(3))
			var out [8]Descriptor
			if n := cons.Dequeue(out[:]); n != 0 {
				t.Fatalf("Dequeue of a corrupt ring = %d", n)
			}
			if err := cons.Err(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Err() = %v", err)
			}
			t.Log(cons.Err())
			if cons.Len() != 0 || cons.Wait(time.Hour, time.Hour) {
				t.Fatal("a corrupt ring still reports data")
			}
		})
	}
}

func TestCorruptHead(t *testing.T) {
	prod, _, mem := newPair(t, 8)
	for i := range 8 {
		d := request(uint64(i))
		prod.Push(&d)
	}
	binary.NativeEndian.PutUint64(mem[offHead:], 100) // beyond what was published
	d := request(8)
	if prod.Enqueue(&d) {
		t.Fatal("Enqueue on a corrupt ring")
	}
	if !errors.Is(prod.Err(), ErrCorrupt) {
		t.Fatalf("Err() = %v", prod.Err())
	}
	if prod.Free() != 0 || prod.WaitSpace(time.Hour, time.Hour) {
		t.Fatal("a corrupt ring reports room")
	}
}

func TestWaitTimesOut(t *testing.T) {
	_, cons, _ := newPair(t, 8)
	for _, tc := range []struct{ spin, sleep time.Duration }{
		{0, 0},
		{time.Millisecond, 0},
		{0, 20 * time.Millisecond},
		{time.Millisecond, 20 * time.Millisecond},
	} {
		start := time.Now()
		if cons.Wait(tc.spin, tc.sleep) {
			t.Fatalf("Wait(%v, %v) on an empty ring returned true", tc.spin, tc.sleep)
		}
		if el := time.Since(start); el < tc.spin+tc.sleep {
			t.Fatalf("Wait(%v, %v) returned after %v", tc.spin, tc.sleep, el)
		}
	}
	if cons.consSleeping.Load() != 0 {
		t.Fatal("sleeping flag left set")
	}
}

func TestWaitSpaceTimesOut(t *testing.T) {
	prod, _, _ := newPair(t, 2)
	d := request(0)
	prod.Push(&d)
	prod.Push(&d)
	start := time.Now()
	if prod.WaitSpace(time.Millisecond, 20*time.Millisecond) {
		t.Fatal("WaitSpace on a full ring returned true")
	}
	if el := time.Since(start); el < 21*time.Millisecond {
		t.Fatalf("WaitSpace returned after %v", el)
	}
}

// untilSet yields until *flag is set: the other goroutine is about to
// sleep (or sleeps) in the futex.
func untilSet(flag *atomic.Uint32) {
	for flag.Load() == 0 {
		runtime.Gosched()
	}
}

// The sleeps in these tests are long; a wake must end them long before.
const (
	longSleep = 30 * time.Second
	wakeLimit = 10 * time.Second
)

func TestWaitWakesOnPublish(t *testing.T) {
	prod, cons, _ := newPair(t, 8)
	type result struct {
		ok bool
		el time.Duration
	}
	res := make(chan result)
	go func() {
		start := time.Now()
		ok := cons.Wait(0, longSleep)
		res <- result{ok, time.Since(start)}
	}()
	untilSet(cons.consSleeping)
	d := request(0)
	prod.Push(&d)
	r := <-res
	if !r.ok || r.el > wakeLimit {
		t.Fatalf("Wait = %v after %v", r.ok, r.el)
	}
	var out [1]Descriptor
	if cons.Dequeue(out[:]) != 1 {
		t.Fatal("nothing to dequeue after the wake")
	}
}

func TestWakeEndsWait(t *testing.T) {
	_, cons, _ := newPair(t, 8)
	res := make(chan bool)
	go func() { res <- cons.Wait(0, longSleep) }()
	untilSet(cons.consSleeping)
	start := time.Now()
	cons.Wake()
	if <-res {
		t.Fatal("Wait reported data on an empty ring")
	}
	if el := time.Since(start); el > wakeLimit {
		t.Fatalf("Wake took %v", el)
	}
}

// TestCoverSilencesPublish: while a stand-in covers a consumer asleep in
// Sleep, a publish wakes nobody (the wake word does not move) and the
// stand-in takes the descriptor; after Uncover a publish wakes the
// sleeper again.
func TestCoverSilencesPublish(t *testing.T) {
	prod, cons, _ := newPair(t, 8)
	res := make(chan bool)
	go func() { res <- cons.Sleep(longSleep) }()
	untilSet(cons.consSleeping)
	cons.Cover()
	if cons.ConsumerSleeping() {
		t.Fatal("a covered sleeper still shows to the producer")
	}
	seq := cons.wakeSeq.Load()
	d := request(0)
	prod.Push(&d)
	if got := cons.wakeSeq.Load(); got != seq {
		t.Fatalf("a publish while covered moved the wake word from %d to %d", seq, got)
	}
	var out [1]Descriptor
	if cons.Dequeue(out[:]) != 1 {
		t.Fatal("the stand-in found nothing to dequeue")
	}
	cons.Uncover()
	if !cons.ConsumerSleeping() {
		t.Fatal("after Uncover the sleeper does not show to the producer")
	}
	prod.Push(&d)
	if !<-res {
		t.Fatal("Sleep did not report the descriptor published after Uncover")
	}
}

// producerAsleep fills a ring of two slots and puts its producer to
// sleep in WaitSpace, whose answer comes on res.
func producerAsleep(t *testing.T) (prod, cons *Ring, d Descriptor, res chan bool) {
	t.Helper()
	prod, cons, _ = newPair(t, 2)
	d = request(0)
	prod.Push(&d)
	prod.Push(&d)
	res = make(chan bool)
	go func() { res <- prod.WaitSpace(0, longSleep) }()
	untilSet(prod.prodSleeping)
	return prod, cons, d, res
}

func TestWaitSpaceWakesOnDequeue(t *testing.T) {
	prod, cons, d, res := producerAsleep(t)
	start := time.Now()
	var out [1]Descriptor
	cons.Dequeue(out[:])
	if !<-res {
		t.Fatal("WaitSpace returned false after a slot was freed")
	}
	if el := time.Since(start); el > wakeLimit {
		t.Fatalf("wake took %v", el)
	}
	if !prod.Push(&d) {
		t.Fatal("no room after WaitSpace")
	}
}

func TestWakeProducerEndsWaitSpace(t *testing.T) {
	prod, _, _, res := producerAsleep(t)
	prod.WakeProducer()
	if <-res {
		t.Fatal("WaitSpace reported room in a full ring")
	}
}

// WaitSpace publishes what was enqueued: otherwise a producer waiting on
// a ring full of unpublished slots would wait for nothing.
func TestWaitSpacePublishes(t *testing.T) {
	prod, cons, _ := newPair(t, 2)
	d := request(0)
	prod.Enqueue(&d)
	prod.Enqueue(&d)
	prod.WaitSpace(0, 0)
	if cons.Len() != 2 {
		t.Fatalf("Len() = %d after WaitSpace", cons.Len())
	}
}

// TestStress moves 4M descriptors between a producer and a consumer
// goroutine with random-ish batch sizes, short spins and real sleeps.
func TestStress(t *testing.T) {
	n := uint64(4 << 20)
	if testing.Short() {
		n = 1 << 18
	}
	stress(t, n, 61, 0, testSleep)
}

// stress moves n descriptors from a producer goroutine to the test's,
// the consumer, through a ring of 256, and checks their order. The
// producer publishes calls of 1 to callMax descriptors (random-ish),
// exposing every exposeEvery-th descriptor's burst (Expose) when that is
// not 0; the consumer spins a microsecond, then sleeps for up to sleep
// (Wait). Either side still short of n after testDeadline fails the
// test: with a sleep that long, a consumer left asleep by a lost wakeup.
func stress(t *testing.T, n, callMax, exposeEvery uint64, sleep time.Duration) {
	t.Helper()
	prod, cons, _ := newPair(t, 256)
	errc := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(testDeadline)
		for seq := uint64(0); seq < n; {
			call := 1 + seq*2654435761%callMax
			for i := uint64(0); i < call && seq < n; i++ {
				d := request(seq)
				if !prod.Enqueue(&d) {
					if !prod.WaitSpace(time.Microsecond, testSleep) && time.Now().After(deadline) {
						errc <- errors.New("producer timed out")
						return
					}
					continue
				}
				if seq++; exposeEvery != 0 && seq%exposeEvery == 0 {
					prod.Expose()
				}
			}
			prod.Publish()
		}
		errc <- nil
	}()
	var out [48]Descriptor
	deadline := time.Now().Add(testDeadline)
	for seq := uint64(0); seq < n; {
		k := cons.Dequeue(out[:1+seq%48])
		if k == 0 {
			// Wait may return early (to a wake aimed at an earlier
			// sleep); only one past the deadline fails.
			if !cons.Wait(time.Microsecond, sleep) && time.Now().After(deadline) {
				t.Fatalf("consumer timed out at %d", seq)
			}
			continue
		}
		for i := range k {
			if err := checkRequest(&out[i], seq); err != nil {
				t.Fatal(err)
			}
			seq++
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if cons.Len() != 0 || prod.Free() != 256 || cons.Err() != nil {
		t.Fatalf("after the run: Len %d Free %d Err %v", cons.Len(), prod.Free(), cons.Err())
	}
}

// TestCrossProcessEcho sends 1M descriptors to a child process, which
// checks their order and echoes each back on a second ring; this process
// checks the echoes' order.
func TestCrossProcessEcho(t *testing.T) {
	n := 1 << 20
	if testing.Short() {
		n = 1 << 16
	}
	c := startChild(t, "echo", 1024, n)
	var stop atomic.Bool
	errc := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(testDeadline)
		for seq := 0; seq < n && !stop.Load(); {
			for i := 0; i < 32 && seq < n; i++ {
				d := request(uint64(seq))
				if !c.req.Enqueue(&d) {
					if !c.req.WaitSpace(testSpin, testSleep) && time.Now().After(deadline) {
						errc <- errors.New("producer timed out")
						return
					}
					break
				}
				seq++
			}
			c.req.Publish()
		}
		errc <- nil
	}()
	defer func() {
		stop.Store(true)
		if err := <-errc; err != nil {
			t.Error(err)
		}
	}()
	var out [64]Descriptor
	deadline := time.Now().Add(testDeadline)
	for seq := 0; seq < n; {
		k := c.rep.Dequeue(out[:])
		if k == 0 {
			select {
			case <-c.exited:
				t.Fatalf("child exited after %d echoes: %v", seq, c.err)
			default:
			}
			if !c.rep.Wait(testSpin, testSleep) && time.Now().After(deadline) {
				t.Fatalf("timed out after %d echoes", seq)
			}
			continue
		}
		for i := range k {
			if err := checkReply(&out[i], uint64(seq)); err != nil {
				t.Fatal(err)
			}
			seq++
		}
	}
	if err := c.wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
}

func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	prod, cons, _ := newPair(t, 64)
	d := request(1)
	var out [32]Descriptor
	allocs := testing.AllocsPerRun(1000, func() {
		for range 32 {
			prod.Enqueue(&d)
		}
		prod.Publish()
		cons.Dequeue(out[:])
		prod.Push(&d)
		cons.Dequeue(out[:1])
		cons.Wait(0, 0)
		prod.WaitSpace(0, 0)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per run", allocs)
	}
}

func FuzzAttach(f *testing.F) {
	for _, c := range []int{2, 4, 16} {
		mem := make([]byte, Size(c))
		if _, err := Init(mem, c); err != nil {
			f.Fatal(err)
		}
		f.Add(mem[:HeaderSize/8], uint16(c))
		binary.NativeEndian.PutUint64(mem[offTail:], 3)
		f.Add(mem[:HeaderSize/4], uint16(c))
		binary.NativeEndian.PutUint64(mem[offHead:], 1)
		f.Add(mem[:HeaderSize/4], uint16(c))
	}
	f.Add([]byte("FERRYRNG"), uint16(8))
	f.Fuzz(func(t *testing.T, header []byte, slots uint16) {
		mem := make([]byte, HeaderSize+int(slots%4097)*SlotSize)
		copy(mem, header)
		r, err := Attach(mem)
		if err != nil {
			if !errors.Is(err, ErrBadHeader) && !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v wraps neither ErrBadHeader nor ErrCorrupt", err)
			}
			return
		}
		if r.Cap() < 2 || HeaderSize+r.Cap()*SlotSize > len(mem) {
			t.Fatalf("accepted capacity %d for %d bytes", r.Cap(), len(mem))
		}
		// Whatever the indices, both sides work without going out of bounds.
		var out [4]Descriptor
		r.Len()
		r.Dequeue(out[:])
		d := request(7)
		r.Free()
		r.Push(&d)
		r.Dequeue(out[:])
	})
}

// TestPublishWakesOncePerSleep: a consumer marked asleep (as one is from
// its sleep until it runs again, woken or not) is woken by the first
// publication only; later ones make no wakeup (the wake word stays), until
// the consumer begins another sleep. The same holds for a producer asleep
// for room and the consumer's Dequeue.
func TestPublishWakesOncePerSleep(t *testing.T) {
	prod, cons, _ := newPair(t, 8)
	// A sleep begun and not ended: the marks sleep leaves from before its
	// futex wait until the sleeper runs again.
	asleep := func(flag, sleeps, counts *atomic.Uint32) {
		counts.Store(1)
		flag.Add(1)
		sleeps.Add(1)
	}
	d := request(0)
	asleep(cons.consSleeping, cons.consSleeps, cons.consCounts)
	seq := cons.wakeSeq.Load()
	for range 3 {
		prod.Push(&d)
	}
	if got := cons.wakeSeq.Load(); got != seq+1 {
		t.Fatalf("three publications to a consumer asleep once moved the wake word by %d, want 1", got-seq)
	}
	asleep(cons.consSleeping, cons.consSleeps, cons.consCounts) // a second sleep (or sleeper)
	prod.Push(&d)
	if got := cons.wakeSeq.Load(); got != seq+2 {
		t.Fatalf("a publication after a second sleep moved the wake word by %d in all, want 2", got-seq)
	}

	full, fcons, _ := newPair(t, 2)
	full.Push(&d)
	full.Push(&d)
	asleep(full.prodSleeping, full.prodSleeps, full.prodCounts)
	space := full.spaceSeq.Load()
	var out [1]Descriptor
	for range 2 {
		if fcons.Dequeue(out[:]) != 1 {
			t.Fatal("nothing to dequeue")
		}
	}
	if got := full.spaceSeq.Load(); got != space+1 {
		t.Fatalf("two dequeues for a producer asleep once moved the space word by %d, want 1", got-space)
	}
}

// TestPublishWakesAnUncountedSleeperEveryTime: a consumer that does not
// count its sleeps (one built before the count; its counts word reads 0)
// is woken by every publication while it is marked asleep, as before.
func TestPublishWakesAnUncountedSleeperEveryTime(t *testing.T) {
	prod, cons, _ := newPair(t, 8)
	cons.consSleeping.Add(1) // asleep, uncounted
	seq := cons.wakeSeq.Load()
	d := request(0)
	for range 3 {
		prod.Push(&d)
	}
	if got := cons.wakeSeq.Load(); got != seq+3 {
		t.Fatalf("three publications to an uncounted sleeper moved the wake word by %d, want 3", got-seq)
	}
}

// TestWakeOnceLosesNoSleeper: a consumer that sleeps again right after a
// wakeup, before the producer's next publication, is woken by it; many
// rounds, each checking that a publication ends a long sleep.
func TestWakeOnceLosesNoSleeper(t *testing.T) {
	prod, cons, _ := newPair(t, 8)
	d := request(0)
	var out [8]Descriptor
	for round := range 200 {
		res := make(chan bool)
		go func() { res <- cons.Wait(0, longSleep) }()
		untilSet(cons.consSleeping)
		start := time.Now()
		prod.Push(&d)
		if !<-res {
			t.Fatalf("round %d: Wait reported nothing after a publication", round)
		}
		if el := time.Since(start); el > wakeLimit {
			t.Fatalf("round %d: the publication woke the sleeper after %v", round, el)
		}
		if cons.Dequeue(out[:]) != 1 {
			t.Fatalf("round %d: nothing to dequeue", round)
		}
	}
}

// TestNapIgnoresPublicationsAndEndsOnWake: a consumer napping is not
// marked asleep, so a publication wakes nobody (the wake word stays) and
// the nap goes on; Wake ends it. The nap is an hour: one that a
// publication ended, or that Wake did not, fails the test.
func TestNapIgnoresPublicationsAndEndsOnWake(t *testing.T) {
	prod, cons, _ := newPair(t, 8)
	done := make(chan struct{})
	go func() {
		cons.Nap(time.Hour)
		close(done)
	}()
	untilNapping(t, "Nap")
	seq := cons.wakeSeq.Load()
	d := request(0)
	prod.Push(&d)
	if cons.ConsumerSleeping() || cons.wakeSeq.Load() != seq {
		t.Fatal("a publication saw a napping consumer asleep and woke it")
	}
	select {
	case <-done:
		t.Fatal("a publication ended the nap")
	default:
	}
	cons.Wake()
	select {
	case <-done:
	case <-time.After(wakeLimit):
		t.Fatalf("Wake did not end the nap within %v", wakeLimit)
	}
}

// untilNapping yields until a goroutine sits in the futex wait of the
// Ring method nap (its stack shows it, in a system call).
func untilNapping(t *testing.T, nap string) {
	t.Helper()
	give := time.Now().Add(wakeLimit)
	for {
		buf := make([]byte, 1<<16)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "ring.(*Ring)."+nap+"(") && strings.Contains(g, "[syscall") {
				return
			}
		}
		if time.Now().After(give) {
			t.Fatalf("no goroutine napping after %v", wakeLimit)
		}
		runtime.Gosched()
	}
}

// TestNapUnlessWaited: a consumer does not nap while its producer says
// it has callers waiting, and a producer that starts waiting ends a nap
// that publications leave alone.
func TestNapUnlessWaited(t *testing.T) {
	prod, cons, _ := newPair(t, 8)
	prod.AddWaiting(1)
	if cons.NapUnlessWaited(time.Hour) {
		t.Fatal("the consumer napped while the producer had a waiter")
	}
	prod.AddWaiting(-1)
	done := make(chan bool)
	go func() { done <- cons.NapUnlessWaited(time.Hour) }()
	untilNapping(t, "NapUnlessWaited")
	d := request(0)
	prod.Push(&d)
	select {
	case <-done:
		t.Fatal("a publication ended the nap")
	default:
	}
	prod.AddWaiting(1) // a caller starts waiting: the nap ends
	select {
	case napped := <-done:
		if !napped {
			t.Fatal("NapUnlessWaited reported no nap")
		}
	case <-time.After(wakeLimit):
		t.Fatalf("a producer that started waiting did not end the nap within %v", wakeLimit)
	}
	if cons.consNapping.Load() != 0 {
		t.Fatal("the napping word stayed set after the nap")
	}
	// With nobody napping, starting to wait wakes nobody.
	prod.AddWaiting(-1)
	seq := cons.wakeSeq.Load()
	prod.AddWaiting(1)
	if cons.wakeSeq.Load() != seq {
		t.Fatal("a producer that started waiting woke a consumer that was not napping")
	}
}

// TestSleepIdleWakesOnPublish: an idle sleep has no time bound, and a
// publish ends it.
func TestSleepIdleWakesOnPublish(t *testing.T) {
	prod, cons, _ := newPair(t, 8)
	res := make(chan bool)
	go func() { res <- cons.SleepIdle(func() bool { return false }) }()
	untilSet(cons.consSleeping)
	d := request(0)
	prod.Push(&d)
	select {
	case ok := <-res:
		if !ok {
			t.Fatal("SleepIdle did not report the descriptor published")
		}
	case <-time.After(wakeLimit):
		t.Fatalf("a publish did not end an idle sleep within %v", wakeLimit)
	}
}

// TestSleepIdleSeesQuit: a consumer that loops on SleepIdle until its
// stop flag is set always stops once the flag is set and Wake called,
// however the two race with its way into the sleep: it has no timeout to
// notice the flag at.
func TestSleepIdleSeesQuit(t *testing.T) {
	_, cons, _ := newPair(t, 8)
	for i := range 500 {
		var stop atomic.Bool
		done := make(chan struct{})
		go func() {
			defer close(done)
			for !stop.Load() {
				cons.SleepIdle(stop.Load)
			}
		}()
		if i%2 == 0 {
			untilSet(cons.consSleeping) // asleep, or every other time on its way
		}
		stop.Store(true)
		cons.Wake()
		select {
		case <-done:
		case <-time.After(wakeLimit):
			t.Fatalf("round %d: the consumer slept through its stop and Wake", i)
		}
	}
}

// TestSleepIdleQuitAfterArming: a stop set (and Wake called) after the
// consumer last looked at it, but before it armed its sleep, ends the
// sleep: the quit function is looked at again once the sleep is armed.
// The stopper acts inside the consumer's first look, the latest moment
// before the arming.
func TestSleepIdleQuitAfterArming(t *testing.T) {
	_, cons, _ := newPair(t, 8)
	var stop atomic.Bool
	looks := 0
	quit := func() bool {
		if looks++; looks == 1 {
			stop.Store(true)
			cons.Wake()
			return false
		}
		return stop.Load()
	}
	done := make(chan struct{})
	go func() { defer close(done); cons.SleepIdle(quit) }()
	select {
	case <-done:
	case <-time.After(wakeLimit):
		cons.Wake() // let the goroutine go
		t.Fatal("the consumer slept through a stop set just before its sleep was armed")
	}
}

// TestExposeIsSeenAndPublishFencesIt: what Expose makes visible a
// polling consumer dequeues, Expose wakes nobody, and the Publish after
// it still wakes a consumer that went to sleep meanwhile, though it has
// no descriptor of its own to add.
func TestExposeIsSeenAndPublishFencesIt(t *testing.T) {
	prod, cons, _ := newPair(t, 8)
	for i := range 3 {
		d := request(uint64(i))
		if !prod.Enqueue(&d) {
			t.Fatal("no room in an empty ring")
		}
	}
	prod.Expose()
	var out [8]Descriptor
	if n := cons.Dequeue(out[:]); n != 3 {
		t.Fatalf("a consumer dequeued %d of 3 exposed descriptors", n)
	}
	for i := range 3 {
		if err := checkRequest(&out[i], uint64(i)); err != nil {
			t.Fatal(err)
		}
	}

	d := request(3)
	prod.Enqueue(&d)
	cons.consCounts.Store(1)
	cons.consSleeping.Add(1) // the consumer goes to sleep
	cons.consSleeps.Add(1)
	seq := cons.wakeSeq.Load()
	prod.Expose()
	if got := cons.wakeSeq.Load(); got != seq {
		t.Fatalf("Expose moved a sleeping consumer's wake word by %d, want 0", got-seq)
	}
	prod.Publish()
	if got := cons.wakeSeq.Load(); got != seq+1 {
		t.Fatalf("Publish after Expose moved a sleeping consumer's wake word by %d, want 1", got-seq)
	}
	prod.Publish() // nothing new since
	if got := cons.wakeSeq.Load(); got != seq+1 {
		t.Fatalf("a Publish with nothing new moved the wake word by %d in all, want 1", got-seq)
	}
}

// TestExposeStress: a producer exposes each burst of 8 of a call and
// publishes at the call's end; a consumer that spins a microsecond and
// then sleeps for as long as the test may take (a lost wakeup fails it)
// takes every descriptor in order.
func TestExposeStress(t *testing.T) {
	n := uint64(2 << 20)
	if testing.Short() {
		n = 1 << 18
	}
	stress(t, n, 97, 8, testDeadline)
}
