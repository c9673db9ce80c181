package ring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"golang.org/x/sys/unix"
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/ferrydev/ferry/internal/atomicx"
)

// LayoutVersion is the version of the ring memory layout below (header
// offsets, SlotSize and the descriptor encoding). A peer that writes
// another version is refused by Attach.
const LayoutVersion = 1

// HeaderSize is the size of the header page that precedes the slots.
const HeaderSize = 4096

// MaxCapacity is the largest capacity Init and Attach accept (1 GiB of
// slots): a bound on what an untrusted header can make us believe.
const MaxCapacity = 1 << 24

// ringMagic is "FERRYRNG" read as a little-endian u64.
const ringMagic uint64 = 0x474e525952524546

// Header layout (plugin.md 3.1). Each side's words sit on their own
// 128-byte block so that adjacent-line prefetch does not make them share.
//
//	0    magic u64, layout version u32, slot size u32, capacity u64
//	128  tail u64                 written by the producer only
//	256  consumer sleeping u32, wake seq u32 (futex word the consumer waits on),
//	     consumer sleeps u32, consumer counts u32, consumer napping u32
//	320  producer sleeping u32, space seq u32 (futex word the producer waits on),
//	     producer sleeps u32, producer counts u32
//	384  head u64                 written by the consumer only
//	512  producer waiting u32     written by the producer only
//	4096 slots, capacity × SlotSize; index i at slot i & (capacity-1)
//
// The sleeps and counts words came later within version 1 (Init has
// always zeroed the header; a side that predates them never reads or
// writes them). A side that counts its sleeps (sleeps: how many it began
// on its futex word, ever) sets its counts word first; its peer then
// wakes it once per sleep begun rather than on every publication while it
// is marked asleep (see wakeOnce), and wakes a peer whose counts word
// reads 0 as before, on every one.
//
// The producer waiting and consumer napping words came later still (see
// NapUnlessWaited). A side that predates them leaves them 0: a producer
// that never says it waits, a consumer that never says it naps.
const (
	offMagic        = 0
	offVersion      = 8
	offSlotSize     = 12
	offCapacity     = 16
	offTail         = 128
	offConsSleeping = 256
	offWakeSeq      = 260
	offConsSleeps   = 264
	offConsCounts   = 268
	offConsNapping  = 272
	offProdSleeping = 320
	offSpaceSeq     = 324
	offProdSleeps   = 328
	offProdCounts   = 332
	offHead         = 384
	// offProdWaiting has a block of its own: the consumer polls the
	// tail's, and a producer that marks its waiters there (four writes a
	// synchronous call) would take that line from it each time.
	offProdWaiting = 512
)

// spinCheck is how many polls pass between looks at the clock (and
// yields of the processor) while spinning.
const spinCheck = 64

// Errors; test them with errors.Is.
var (
	// ErrBadHeader means Attach found memory that is not a ring this
	// version can use: wrong magic, layout version, slot size or capacity.
	ErrBadHeader = errors.New("ring: bad header")
	// ErrCorrupt means the other side wrote an impossible index (a tail
	// behind the head or more than a ring ahead, an index that moved
	// backwards). The ring stops: Dequeue returns 0, Enqueue false.
	ErrCorrupt = errors.New("ring: corrupt index")
)

// Ring is one side's handle on a single-producer, single-consumer ring of
// descriptors in shared memory. A process uses either the producer methods
// (Enqueue, Publish, Push, Free, WaitSpace) or the consumer methods
// (Dequeue, Wait, Len), each from one goroutine at a time; in one process
// a producer goroutine and a consumer goroutine may share a Ring. Wake,
// WakeProducer, Cap and Err may be called from anywhere.
type Ring struct {
	mem   []byte
	slots []byte
	cap   uint64
	mask  uint64

	tail         *atomic.Uint64
	head         *atomic.Uint64
	consSleeping *atomic.Uint32
	wakeSeq      *atomic.Uint32
	prodSleeping *atomic.Uint32
	spaceSeq     *atomic.Uint32
	consSleeps   *atomic.Uint32
	prodSleeps   *atomic.Uint32
	consCounts   *atomic.Uint32
	prodCounts   *atomic.Uint32
	prodWaiting  *atomic.Uint32
	consNapping  *atomic.Uint32

	broken atomic.Bool
	err    atomic.Pointer[error]

	_ [64]byte
	// Producer's state: the next index to write, the last index
	// published, and the last head read from shared memory.
	ptail      uint64
	pubTail    uint64
	fenced     uint64 // the last index Publish stored (Expose does not)
	cachedHead uint64
	// consWoken: the consumer sleeps count the producer last woke at.
	consWoken uint32
	_         [64]byte
	// Consumer's state: the next index to read and the last tail read,
	// and the producer sleeps count it last woke at.
	chead      uint64
	cachedTail uint64
	prodWoken  uint32
	// gosched: how long a spin of Wait and WaitSpace keeps its P before
	// it yields it to other goroutines at each look (SetSpinGosched).
	gosched time.Duration
	// handoff: this side's sleeps hand their P over (SetSleepHandoff).
	handoff atomic.Bool
	_       [64]byte
}

// Size returns the bytes of memory a ring of capacity slots needs: the
// header page and the slots. It panics if capacity is not a power of two
// between 2 and MaxCapacity.
func Size(capacity int) int {
	if err := checkCapacity(uint64(capacity)); err != nil || capacity < 0 {
		panic(fmt.Sprintf("ring.Size(%d): capacity must be a power of two in [2, %d]", capacity, MaxCapacity))
	}
	return HeaderSize + capacity*SlotSize
}

func checkCapacity(c uint64) error {
	if c < 2 || c > MaxCapacity || bits.OnesCount64(c) != 1 {
		return fmt.Errorf("capacity %d is not a power of two in [2, %d]", c, MaxCapacity)
	}
	return nil
}

// Init writes a fresh ring header into mem, which must hold
// Size(capacity) bytes and be 8-byte aligned (a mapping is page aligned),
// and returns the creator's handle. The other process calls Attach.
func Init(mem []byte, capacity int) (*Ring, error) {
	if capacity < 0 {
		return nil, fmt.Errorf("ring: init: capacity %d is negative", capacity)
	}
	if err := checkCapacity(uint64(capacity)); err != nil {
		return nil, fmt.Errorf("ring: init: %w", err)
	}
	if need := Size(capacity); len(mem) < need {
		return nil, fmt.Errorf("ring: init: %d bytes of memory, a ring of %d slots needs %d", len(mem), capacity, need)
	}
	if !aligned(mem) {
		return nil, errors.New("ring: init: memory is not 8-byte aligned")
	}
	clear(mem[:HeaderSize])
	binary.LittleEndian.PutUint32(mem[offVersion:], LayoutVersion)
	binary.LittleEndian.PutUint32(mem[offSlotSize:], SlotSize)
	binary.LittleEndian.PutUint64(mem[offCapacity:], uint64(capacity))
	// The magic goes last: a header with the magic is complete.
	(*atomic.Uint64)(unsafe.Pointer(&mem[offMagic])).Store(ringMagic)
	return newRing(mem, uint64(capacity), 0, 0), nil
}

// Attach validates the ring header in mem, written by Init in another
// process, and returns this side's handle. The memory is untrusted: a bad
// header is an error wrapping [ErrBadHeader] (or [ErrCorrupt] for
// impossible indices), never a panic.
func Attach(mem []byte) (*Ring, error) {
	if len(mem) < HeaderSize {
		return nil, fmt.Errorf("%w: %d bytes of memory, the header alone is %d", ErrBadHeader, len(mem), HeaderSize)
	}
	if !aligned(mem) {
		return nil, errors.New("ring: attach: memory is not 8-byte aligned")
	}
	if m := (*atomic.Uint64)(unsafe.Pointer(&mem[offMagic])).Load(); m != ringMagic {
		return nil, fmt.Errorf("%w: magic %#x, want %#x", ErrBadHeader, m, ringMagic)
	}
	if v := binary.LittleEndian.Uint32(mem[offVersion:]); v != LayoutVersion {
		return nil, fmt.Errorf("%w: layout version %d, this side speaks %d", ErrBadHeader, v, LayoutVersion)
	}
	if s := binary.LittleEndian.Uint32(mem[offSlotSize:]); s != SlotSize {
		return nil, fmt.Errorf("%w: slot size %d, want %d", ErrBadHeader, s, SlotSize)
	}
	c := binary.LittleEndian.Uint64(mem[offCapacity:])
	if err := checkCapacity(c); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadHeader, err)
	}
	if need := uint64(HeaderSize) + c*SlotSize; uint64(len(mem)) < need {
		return nil, fmt.Errorf("%w: capacity %d needs %d bytes, memory is %d", ErrBadHeader, c, need, len(mem))
	}
	head := (*atomic.Uint64)(unsafe.Pointer(&mem[offHead])).Load()
	tail := (*atomic.Uint64)(unsafe.Pointer(&mem[offTail])).Load()
	if tail < head || tail-head > c {
		return nil, fmt.Errorf("%w: head %d, tail %d, capacity %d", ErrCorrupt, head, tail, c)
	}
	return newRing(mem, c, head, tail), nil
}

func aligned(mem []byte) bool {
	return uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%8 == 0
}

func newRing(mem []byte, capacity, head, tail uint64) *Ring {
	r := &Ring{
		mem:          mem,
		slots:        mem[HeaderSize : HeaderSize+capacity*SlotSize],
		cap:          capacity,
		mask:         capacity - 1,
		tail:         (*atomic.Uint64)(unsafe.Pointer(&mem[offTail])),
		head:         (*atomic.Uint64)(unsafe.Pointer(&mem[offHead])),
		consSleeping: (*atomic.Uint32)(unsafe.Pointer(&mem[offConsSleeping])),
		wakeSeq:      (*atomic.Uint32)(unsafe.Pointer(&mem[offWakeSeq])),
		prodSleeping: (*atomic.Uint32)(unsafe.Pointer(&mem[offProdSleeping])),
		spaceSeq:     (*atomic.Uint32)(unsafe.Pointer(&mem[offSpaceSeq])),
		consSleeps:   (*atomic.Uint32)(unsafe.Pointer(&mem[offConsSleeps])),
		prodSleeps:   (*atomic.Uint32)(unsafe.Pointer(&mem[offProdSleeps])),
		consCounts:   (*atomic.Uint32)(unsafe.Pointer(&mem[offConsCounts])),
		prodCounts:   (*atomic.Uint32)(unsafe.Pointer(&mem[offProdCounts])),
		prodWaiting:  (*atomic.Uint32)(unsafe.Pointer(&mem[offProdWaiting])),
		consNapping:  (*atomic.Uint32)(unsafe.Pointer(&mem[offConsNapping])),
	}
	r.ptail, r.pubTail, r.fenced, r.cachedHead = tail, tail, tail, head
	r.chead, r.cachedTail = head, head
	// A side that attaches has woken nobody yet: whoever is marked asleep
	// now is woken by its first publication (or freeing).
	r.consWoken = r.consSleeps.Load() - 1
	r.prodWoken = r.prodSleeps.Load() - 1
	return r
}

// Cap returns the number of slots.
func (r *Ring) Cap() int { return int(r.cap) }

// Err returns nil, or the error (wrapping [ErrCorrupt]) that stopped the
// ring when the other side wrote an impossible index.
func (r *Ring) Err() error {
	if p := r.err.Load(); p != nil {
		return *p
	}
	return nil
}

func (r *Ring) corrupt(format string, args ...any) {
	err := fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	r.err.CompareAndSwap(nil, &err)
	r.broken.Store(true)
}

// --- producer ---

// refreshHead reloads the consumer's head. The consumer can only have
// freed slots that were published, and never gives one back.
func (r *Ring) refreshHead() bool {
	h := r.head.Load()
	if h < r.cachedHead || h > r.pubTail {
		r.corrupt("head %d outside [%d, %d]", h, r.cachedHead, r.pubTail)
		return false
	}
	r.cachedHead = h
	return true
}

// hasSpace reports whether one more descriptor fits.
func (r *Ring) hasSpace() bool {
	if r.broken.Load() {
		return false
	}
	if r.ptail-r.cachedHead < r.cap {
		return true
	}
	return r.refreshHead() && r.ptail-r.cachedHead < r.cap
}

// Enqueue writes d into the next slot if there is room, and reports
// whether there was. The slot is not visible to the consumer until
// Publish.
//
// Once it wrote a slot, Enqueue asks for the next slot's cache line for
// writing (prefetchWrite). The consumer read each slot last
// time round, so its line sits in the consumer's cache and the
// producer's write has to take it back from there; the producer's next
// locked instruction (the host lane's mutex, a counter) then waits for
// that. On a 2-vCPU AMD EPYC KVM guest whose vCPUs were far apart (a
// line's round trip between them 950 ns), the host's mutex Unlock after
// each Put was a quarter of its CPU for 4 KiB shm writes 128 at a time.
// Asked for one Enqueue early, the line is on its way while the
// producer prepares the next descriptor. Asking further
// ahead did less, probably because the consumer's hardware prefetcher,
// which follows its reads through the slots, takes lines back that were
// taken too early (not measured).
// ferry bench --transport shm --size 4KiB --batch 128, 3 interleaved
// runs a campaign, GB/s: without 8.47-9.08, one slot ahead 11.47-12.39,
// four 9.88-10.89, sixteen 8.69-9.99; in a second, without 8.03-9.07,
// one ahead 9.74-12.35, two 8.48-11.96. With the vCPUs close (225 ns a
// round trip) it made no difference.
func (r *Ring) Enqueue(d *Descriptor) bool {
	if !r.hasSpace() {
		return false
	}
	off := (r.ptail & r.mask) * SlotSize
	d.Encode(r.slots[off : off+SlotSize])
	r.ptail++
	// Ask for the next slot's line for writing, if the slot is free.
	if r.ptail-r.cachedHead < r.cap {
		prefetchWrite(unsafe.Pointer(&r.slots[(r.ptail&r.mask)*SlotSize]))
	}
	return true
}

// Publish makes every enqueued descriptor visible with one atomic store of
// the tail, then wakes the consumer if, and only if, it sleeps.
func (r *Ring) Publish() {
	if r.ptail == r.fenced {
		return
	}
	r.pubTail, r.fenced = r.ptail, r.ptail
	// Dekker with Wait: the store of tail and the load of the sleeping
	// flag are both sequentially consistent, so either the consumer's
	// re-check sees the tail or this load sees the flag.
	r.tail.Store(r.ptail)
	if r.consSleeping.Load() != 0 {
		wakeOnce(r.consCounts, r.consSleeps, &r.consWoken, r.wakeSeq)
	}
}

// Expose makes every enqueued descriptor visible, as Publish does, but
// with a plain store of the tail (a release: the slots are written
// before it) and no look at whether the consumer sleeps: no full
// barrier, so the producer goes on while the store travels. A consumer
// that goes to sleep meanwhile may not see it, so the producer must
// Publish before it waits on anything or stops producing, and should
// Publish instead while the consumer sleeps (ConsumerSleeping): Expose
// is for the bursts in the middle of a run of publications, which the
// run's last Publish fences and, if the consumer went to sleep since,
// wakes it for.
//
// A full barrier waits for every store before it, and the tail's line
// sits in the cache of the consumer that polls it: on a 2-vCPU guest
// whose vCPUs were far apart (a line's round trip about 950 ns), the
// engine exposing all but the last of a Submit's bursts of 8 took 4 KiB
// shm writes in batches of 128 from 14.6 to 16.4 GB/s at the median (its
// Submit from 23.4 to 19.9 us a batch; ferry bench, 8 far rounds of 10
// interleaved). With the vCPUs close it did not help: 20.9 against
// 21.8-22.4 GB/s in the other 2 rounds (docs/performance.md).
func (r *Ring) Expose() {
	if r.ptail == r.pubTail {
		return
	}
	r.pubTail = r.ptail
	atomicx.StoreRelease64(r.tail, r.ptail)
}

// wakeOnce wakes the sleepers on word, unless every sleep begun on it
// (sleeps) was woken already by this side (woken, the count it last woke
// at). A sleeper stays marked asleep from the wakeup until it runs, which
// on a busy machine is long: waking it on every publication meanwhile
// cost the producer a system call per descriptor (a plugin completing
// small writes made 400,000 a second, for nothing). A peer that does not
// count its sleeps (counts reads 0: it predates the count) is woken every
// time, as before.
//
// No wakeup is lost: a sleeper counts its sleep (sleep) after it reads
// word and before it looks at the ring again, so a sleep that waits on
// the value of word this side's last wake left is counted after it, and
// shows here as a count not woken yet; one counted before it read an
// older value of word, which the last wake changed.
func wakeOnce(counts, sleeps *atomic.Uint32, woken *uint32, word *atomic.Uint32) {
	if counts.Load() != 0 {
		n := sleeps.Load()
		if n == *woken {
			return
		}
		*woken = n
	}
	word.Add(1)
	futexWake(word, math.MaxInt32)
}

// Push enqueues d and publishes it; it reports whether there was room.
func (r *Ring) Push(d *Descriptor) bool {
	if !r.Enqueue(d) {
		return false
	}
	r.Publish()
	return true
}

// Free returns how many descriptors the producer can enqueue now.
func (r *Ring) Free() int {
	if r.broken.Load() || !r.refreshHead() {
		return 0
	}
	return int(r.cap - (r.ptail - r.cachedHead))
}

// WaitSpace blocks the producer until at least one slot is free: it polls
// for up to spin, then sleeps until the consumer frees a slot or maxSleep
// passes. It reports whether there is room. It first publishes what was
// enqueued, since the consumer cannot free slots it cannot see. It never
// waits longer than about spin+maxSleep; a producer loops and checks that
// its consumer is alive between calls.
func (r *Ring) WaitSpace(spin, maxSleep time.Duration) bool {
	r.Publish()
	if r.hasSpace() {
		return true
	}
	return r.await(false, spin, maxSleep, r.hasSpace)
}

// WakeProducer wakes a producer sleeping in WaitSpace even if no slot was
// freed (used at shutdown); its WaitSpace returns.
func (r *Ring) WakeProducer() {
	r.spaceSeq.Add(1)
	futexWake(r.spaceSeq, math.MaxInt32)
}

// --- consumer ---

// refreshTail reloads the producer's tail and checks it: it may not move
// backwards nor run more than a ring ahead of the head.
func (r *Ring) refreshTail() bool {
	t := r.tail.Load()
	if t < r.cachedTail || t-r.chead > r.cap {
		r.corrupt("tail %d outside [%d, %d]", t, r.cachedTail, r.chead+r.cap)
		return false
	}
	r.cachedTail = t
	return true
}

// readable reports whether a descriptor is available.
func (r *Ring) readable() bool {
	if r.broken.Load() {
		return false
	}
	if r.cachedTail != r.chead {
		return true
	}
	return r.refreshTail() && r.cachedTail != r.chead
}

// Dequeue copies up to len(out) published descriptors into out, frees
// their slots with one store of the head, and returns how many it copied:
// 0 when the ring is empty or corrupt (see Err). Each descriptor is copied
// once out of shared memory; validate the copy, never the slot. If the
// producer sleeps in WaitSpace, Dequeue wakes it.
func (r *Ring) Dequeue(out []Descriptor) int {
	if r.broken.Load() {
		return 0
	}
	avail := r.cachedTail - r.chead
	if avail < uint64(len(out)) && r.refreshTail() {
		avail = r.cachedTail - r.chead
	}
	n := min(avail, uint64(len(out)))
	if n == 0 || r.broken.Load() {
		return 0
	}
	h := r.chead
	for i := range n {
		off := ((h + i) & r.mask) * SlotSize
		out[i].Decode(r.slots[off : off+SlotSize])
	}
	r.chead = h + n
	// Dekker with WaitSpace, as in Publish.
	r.head.Store(r.chead)
	if r.prodSleeping.Load() != 0 {
		wakeOnce(r.prodCounts, r.prodSleeps, &r.prodWoken, r.spaceSeq)
	}
	return int(n)
}

// Len returns how many published descriptors the consumer has not taken.
func (r *Ring) Len() int {
	if r.broken.Load() || !r.refreshTail() {
		return 0
	}
	return int(r.cachedTail - r.chead)
}

// Wait blocks the consumer until a descriptor is available and reports
// whether one is. It polls for up to spin (looking at the clock and
// yielding the processor every few polls), then sets the sleeping flag and
// sleeps on the wake word until the producer publishes, Wake is called or
// maxSleep passes. It never waits longer than about spin+maxSleep: callers
// loop, checking their context and the producer's liveness between calls.
// It returns false at once on a corrupt ring, and may return false early
// when woken with nothing to read (by Wake, or by a wake the producer
// aimed at an earlier Wait).
func (r *Ring) Wait(spin, maxSleep time.Duration) bool {
	if r.readable() {
		return true
	}
	return r.await(true, spin, maxSleep, r.readable)
}

// await is the slow half of Wait (consumer) and WaitSpace: it polls ready
// for up to spin, looking at the clock and yielding to other goroutines
// every spinCheck polls (never to other processes: see Yield), then
// sleeps until ready, a wake or maxSleep. Its callers have checked ready
// once already, without the indirect call.
func (r *Ring) await(consumer bool, spin, maxSleep time.Duration, ready func() bool) bool {
	if r.broken.Load() {
		return false
	}
	if spin > 0 {
		start := time.Now()
		for i := 1; ; i++ {
			if ready() {
				return true
			}
			if i%spinCheck == 0 {
				spun := time.Since(start)
				if spun >= spin {
					break
				}
				if spun >= r.gosched {
					runtime.Gosched()
				}
			}
		}
	}
	return r.sleep(consumer, maxSleep, ready)
}

// ConsumerSleeping reports whether a consumer sleeps on the ring (or is
// about to).
func (r *Ring) ConsumerSleeping() bool { return r.consSleeping.Load() != 0 }

// Pending reports, from the shared indices alone, whether published
// descriptors wait to be taken. Unlike Dequeue and Wait it touches no
// consumer-local state, so a goroutine may call it while another goroutine
// is the consumer (the callers then serialise Dequeue among themselves).
func (r *Ring) Pending() bool {
	return !r.broken.Load() && r.tail.Load() != r.head.Load()
}

// Sleep is Wait without the spin and without consumer-local state: it
// sleeps until Pending, Wake or maxSleep, and reports Pending. Use it when
// several goroutines take turns consuming under a lock of their own and
// the one that sleeps must not hold that lock.
func (r *Ring) Sleep(maxSleep time.Duration) bool {
	if r.Pending() {
		return true
	}
	if r.broken.Load() {
		return false
	}
	return r.sleep(true, maxSleep, r.Pending)
}

// Forever, as a bound on a sleep, is none: the sleep ends at a
// publication (or freeing), a wake or a signal, never by the clock.
const Forever time.Duration = math.MaxInt64

// SleepIdle is Sleep with no time bound, for a consumer with nothing to
// do: it sleeps until Pending, Wake, or quit reports true, and reports
// Pending. quit is looked at after the sleep is armed (the wake word
// read, the sleeping mark set), so a caller that makes quit true and
// then calls Wake always ends the sleep, and one that raises a count
// quit reads and then checks ConsumerSleeping (Dekker) ends it or is
// seen: what a bounded sleep would notice at its timeout is noticed at
// once or not at all. An idle process then makes no wakeups: with a
// bound, each timeout cost it one, and the Go runtime about sixty more
// (its sysmon takes back the P of a goroutine that stays in a system
// call, then polls from 20 us up to 10 ms before it sleeps again).
func (r *Ring) SleepIdle(quit func() bool) bool {
	if r.Pending() {
		return true
	}
	if r.broken.Load() || quit() {
		return false
	}
	r.sleep(true, Forever, func() bool { return r.Pending() || quit() })
	return r.Pending()
}

// Cover is for a goroutine that polls the ring in place of a consumer
// asleep in Sleep (a stand-in): it withdraws that sleep from what the
// producer checks, so that while the stand-in polls, the producer
// publishes without a wakeup. Pair with Uncover, then check Pending: what
// was published while covered woke nobody.
//
// The sleeping mark is a count, so Cover and Uncover commute with the
// consumer's own sleeps and wakes: while the consumer is awake the count
// reads nonzero (it wraps below zero) and the producer merely wakes
// nobody.
func (r *Ring) Cover() { r.consSleeping.Add(^uint32(0)) }

// Uncover ends Cover.
func (r *Ring) Uncover() { r.consSleeping.Add(1) }

// Nap sleeps the calling consumer for up to d without marking it asleep:
// the producer's publications do not end it (nor pay a wakeup), Wake
// does. A consumer that wants what arrives over d reaped together, and
// nothing sooner, naps. The kernel may stretch d by its timer slack
// (50 us by default).
func (r *Ring) Nap(d time.Duration) {
	if d <= 0 || r.broken.Load() {
		return
	}
	futexWait(r.wakeSeq, r.wakeSeq.Load(), d, false)
}

// NapUnlessWaited is Nap for a consumer that is to stay prompt while
// its producer has callers waiting on what it published (AddWaiting): it
// does not nap while the producer's waiting word is nonzero, and a
// producer that starts waiting while it naps ends the nap. It reports
// whether it napped.
func (r *Ring) NapUnlessWaited(d time.Duration) bool {
	if d <= 0 || r.broken.Load() || r.prodWaiting.Load() != 0 {
		return false
	}
	seq := r.wakeSeq.Load()
	r.consNapping.Add(1)
	// Dekker, as in sleep: napping is set before this re-check, so a
	// producer that starts waiting after it sees napping and wakes us
	// (bumping seq); one that did so before is seen here.
	if r.prodWaiting.Load() == 0 {
		futexWait(r.wakeSeq, seq, d, false)
	}
	r.consNapping.Add(^uint32(0))
	return true
}

// Tail returns how far the producer has published (the shared tail); with
// Consumed a producer asks whether the consumer has taken what it had
// published by then.
func (r *Ring) Tail() uint64 { return r.tail.Load() }

// Consumed reports whether the consumer has taken every descriptor
// published before index i (a Tail reading).
func (r *Ring) Consumed(i uint64) bool { return r.head.Load() >= i }

// Waiting reports whether the producer says it has callers waiting
// (AddWaiting).
func (r *Ring) Waiting() bool { return r.prodWaiting.Load() != 0 }

// AddWaiting adds delta (+1 or -1) to the producer's count of callers
// waiting on what it published, which NapUnlessWaited reads; a consumer
// napping when the count rises from 0 is woken. The producer side calls
// it, from any goroutine.
func (r *Ring) AddWaiting(delta int32) {
	if r.prodWaiting.Add(uint32(delta)) == uint32(delta) && delta > 0 && r.consNapping.Load() != 0 {
		r.Wake()
	}
}

// Wake wakes a consumer sleeping in Wait even if nothing was published
// (used at shutdown); its Wait returns.
func (r *Ring) Wake() {
	r.wakeSeq.Add(1)
	futexWake(r.wakeSeq, math.MaxInt32)
}

// sleep is the sleeping half of Wait (consumer) and WaitSpace (producer).
func (r *Ring) sleep(consumer bool, maxSleep time.Duration, ready func() bool) bool {
	flag, word, sleeps, counts := r.prodSleeping, r.spaceSeq, r.prodSleeps, r.prodCounts
	if consumer {
		flag, word, sleeps, counts = r.consSleeping, r.wakeSeq, r.consSleeps, r.consCounts
	}
	if counts.Load() == 0 {
		counts.Store(1) // before the first sleep is counted: see wakeOnce
	}
	if maxSleep <= 0 {
		return ready()
	}
	var deadline time.Time
	if maxSleep != Forever {
		deadline = time.Now().Add(maxSleep)
	}
	// The flag counts sleepers rather than marking one: in the host,
	// a waiter and the reaper may sleep on the same ring at once, and one
	// waking must not clear the other's mark.
	for {
		seq := word.Load()
		flag.Add(1)
		sleeps.Add(1) // after word was read: see wakeOnce
		// Dekker: the flag is set before this re-check, so a peer that
		// publishes (or frees) after it sees the flag and wakes us; one
		// that did so before changed what ready sees, or bumped seq and
		// makes FUTEX_WAIT return at once.
		if ready() {
			flag.Add(^uint32(0))
			return true
		}
		left := Forever
		if maxSleep != Forever {
			left = time.Until(deadline)
		}
		if left <= 0 || r.broken.Load() {
			flag.Add(^uint32(0))
			return false
		}
		futexWait(word, seq, left, r.handoff.Load())
		flag.Add(^uint32(0))
		if ready() {
			return true
		}
		if word.Load() != seq {
			// Woken with nothing to do: Wake or WakeProducer.
			return false
		}
		// Timeout, signal or spurious wakeup: the deadline decides
		// (Forever has none: sleep again).
	}
}

// Yield gives way to other goroutines (runtime.Gosched) and, once spun
// has reached YieldAfter, to other processes too (sched_yield). It is for
// a spinner with no caller's latency to win (the engine's reaper): Wait's
// and WaitSpace's spins no longer call it. On Linux's EEVDF scheduler
// (6.6 and later) sched_yield moves the yielding thread's deadline back a
// slice, so a spinner that yields falls behind every runnable thread on
// its CPU and, when what it waits for comes, waits out their slices:
// beside one busy loop per core, 4 KiB shm writes one at a time ran at
// 0.55 GB/s while the plugin's and the engine's waiting spins yielded,
// and at 1.15 once they did not. A spin is bounded by its budget and then
// sleeps on the ring, which is how it leaves the CPU to a peer.
func Yield(spun time.Duration) {
	runtime.Gosched()
	YieldThread(spun)
}

// SetSpinGosched has Wait's and WaitSpace's spins keep their P for the
// first d of each spin, rather than yield it to other goroutines at every
// look (Yield): for a side whose spinning goroutine needs no other
// goroutine of its process to run meanwhile (see sdk.SpinsAlone). 0, the
// default, yields from the first look. Call it before the ring is waited
// on, from the goroutine that waits.
func (r *Ring) SetSpinGosched(d time.Duration) { r.gosched = d }

// SpinGosched returns what SetSpinGosched set.
func (r *Ring) SpinGosched() time.Duration { return r.gosched }

// SetSleepHandoff has this side's sleeps on the ring (Wait, Sleep,
// SleepIdle, WaitSpace) that last past 50 us go on as blocking system
// calls, which hand the goroutine's P to the Go scheduler, rather than
// leave it in the call for the runtime's monitor thread (sysmon) to take.
// Each such take has the monitor wake every 20 to 70 us for the next few
// milliseconds, and each of its wakeups takes the core it lands on for a
// while: on a two-vCPU guest, beside a saturating bulk stream, they were
// the tail of high-priority 4 KiB reads over shm (9x their unloaded p99),
// whose waiter and lane spin on both cores. The hand-over costs a thread
// wakeup per such sleep when the process's other Ps are busy or idle,
// which large transfers pay: transfer.handoff_sleeps (docs/qos.md).
// Elsewhere than Linux on amd64 and arm64 (blocking_linux_*.s), it does
// nothing.
func (r *Ring) SetSleepHandoff(on bool) { r.handoff.Store(on) }

// SleepHandoff returns what SetSleepHandoff set.
func (r *Ring) SleepHandoff() bool { return r.handoff.Load() }

// YieldThread is Yield for a goroutine locked to its OS thread, such as
// a call from C into Go (a cgo callback): there runtime.Gosched cannot
// run another goroutine on the thread, so it hands the thread's P to
// another thread and waits to get it back, two futex wakes per look. It
// only yields to other processes, once the spin has lasted YieldAfter;
// what Yield says of sched_yield holds for it.
func YieldThread(spun time.Duration) {
	if spun >= YieldAfter {
		unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

// YieldAfter is how long a spin keeps its CPU before Yield and
// YieldThread yield it to other processes.
const YieldAfter = 150 * time.Microsecond
