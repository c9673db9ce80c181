package simdev

import (
	"sync"
	"time"

	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/ring"
)

// copyWorkers is how many goroutines run copies: a GPU has a few copy
// engines, and these machines two cores.
const copyWorkers = 2

const statusShutdown = ring.StatusShutdown

type copyJob struct {
	c    sdk.DeviceCopy
	done sdk.Completer
}

// copier runs copies on a pool of workers it owns; stop ends them. It
// throttles to bandwidth (bytes per second, all workers together; 0:
// none) by booking each copy a slot on one timeline, as one copy engine
// would run them back to back.
type copier struct {
	d         *Device
	bandwidth uint64

	mu       sync.Mutex
	cond     *sync.Cond
	queue    []copyJob
	stopping bool
	busy     time.Time // the timeline: when the booked copies end
	wg       sync.WaitGroup
}

func newCopier(d *Device, workers int, bandwidth uint64) *copier {
	c := &copier{d: d, bandwidth: bandwidth}
	c.cond = sync.NewCond(&c.mu)
	c.wg.Add(workers)
	for range workers {
		go c.work()
	}
	return c
}

// submit queues a copy; it never blocks on a copy.
func (c *copier) submit(dc sdk.DeviceCopy, done sdk.Completer) {
	c.mu.Lock()
	if c.stopping {
		c.mu.Unlock()
		done.Complete(dc.Token, statusShutdown, 0)
		return
	}
	c.queue = append(c.queue, copyJob{dc, done})
	c.mu.Unlock()
	c.cond.Signal()
}

// stop completes what is still queued with StatusShutdown and waits for
// the workers, which finish the copies they hold.
func (c *copier) stop() {
	c.mu.Lock()
	c.stopping = true
	left := c.queue
	c.queue = nil
	c.mu.Unlock()
	c.cond.Broadcast()
	for _, j := range left {
		j.done.Complete(j.c.Token, statusShutdown, 0)
	}
	c.wg.Wait()
}

func (c *copier) work() {
	defer c.wg.Done()
	for {
		c.mu.Lock()
		for len(c.queue) == 0 && !c.stopping {
			c.cond.Wait()
		}
		if c.stopping {
			c.mu.Unlock()
			return
		}
		j := c.queue[0]
		c.queue[0] = copyJob{}
		c.queue = c.queue[1:]
		end := c.book(j.c.Length)
		c.mu.Unlock()
		if wait := time.Until(end); wait > 0 {
			time.Sleep(wait) // the simulated transfer time, not a synchronisation
		}
		st, n := c.d.move(j.c)
		j.done.Complete(j.c.Token, st, n)
	}
}

// book reserves length bytes' time on the timeline and returns when the
// copy may complete; the zero time without a bandwidth. Under c.mu.
func (c *copier) book(length uint64) time.Time {
	if c.bandwidth == 0 {
		return time.Time{}
	}
	now := time.Now()
	if c.busy.Before(now) {
		c.busy = now
	}
	c.busy = c.busy.Add(time.Duration(float64(length) / float64(c.bandwidth) * float64(time.Second)))
	return c.busy
}

// move copies between two regions, checking both ranges.
func (d *Device) move(c sdk.DeviceCopy) (ring.Status, uint64) {
	d.regionMu.RLock()
	defer d.regionMu.RUnlock()
	src, ok1 := d.regions[c.Src.Region]
	dst, ok2 := d.regions[c.Dst.Region]
	if !ok1 || !ok2 || !inBounds(src.mem, c.Src.Offset, c.Length) || !inBounds(dst.mem, c.Dst.Offset, c.Length) {
		return ring.StatusInvalid, 0
	}
	copy(dst.mem[c.Dst.Offset:c.Dst.Offset+c.Length], src.mem[c.Src.Offset:c.Src.Offset+c.Length])
	return ring.StatusOK, c.Length
}

func inBounds(mem []byte, off, length uint64) bool {
	n := uint64(len(mem))
	return off <= n && length <= n-off
}
