package path

import (
	"runtime"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host/progress"
	"github.com/ferrydev/ferry/sdk/ring"
)

// newBurstLane returns lane id, depth deep, closed at the test's end,
// and the plugin's side of its submission ring: a real consumer attached
// to the lane's memfd ring.
func newBurstLane(t *testing.T, id uint32, depth int) (*progress.Lane, *ring.Ring) {
	t.Helper()
	l, err := progress.NewLane(id, depth, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(false) })
	c, err := ring.Attach(l.SQ.Mem())
	if err != nil {
		t.Fatal(err)
	}
	return l, c
}

// pluginSleeps has the plugin's side c of lane l sleep on its ring
// (ring.Sleep) and returns once the lane sees it asleep; the channel
// tells what the sleep reported when it ends.
func pluginSleeps(t *testing.T, l *progress.Lane, c *ring.Ring) <-chan bool {
	t.Helper()
	woke := make(chan bool, 1)
	go func() { woke <- c.Sleep(time.Minute) }()
	for deadline := time.Now().Add(10 * time.Second); !l.PluginAsleep(); runtime.Gosched() {
		if time.Now().After(deadline) {
			t.Fatal("the plugin's side did not fall asleep on the ring within 10s")
		}
	}
	return woke
}

// putRunOn puts a run of n writes on l for the call sc (more: requests
// of the call follow) and ends it as submitRun does (endRun).
func putRunOn(t *testing.T, l *progress.Lane, sc *submitCtx, n int, more bool) {
	t.Helper()
	sc.more = more
	l.Begin()
	for range n {
		if err := l.Put(&ring.Descriptor{Op: ring.OpWrite, Length: 4096}, nil, 0); err != nil {
			t.Fatal(err)
		}
	}
	sc.endRun(l, n)
}

// TestSubmitBurstPublishes pins when a Submit call's descriptors become
// visible to the plugin (submitCtx.end): a burst at a time while more
// of the call follow, another lane's held ones with a put on a new lane
// (which is published too), and everything at the call's end
// (publishHeld). The plugin's
// side is a real consumer attached to the lanes' memfd rings.
func TestSubmitBurstPublishes(t *testing.T) {
	a, ca := newBurstLane(t, 1, 64)
	b, cb := newBurstLane(t, 2, 64)
	var sc submitCtx
	token := uint64(0)
	put := func(l *progress.Lane, more bool) {
		t.Helper()
		token++
		sc.more = more
		l.Begin()
		if err := l.Put(&ring.Descriptor{Token: token, Op: ring.OpWrite, Length: 4096}, nil, 0); err != nil {
			t.Fatal(err)
		}
		sc.end(l)
	}
	out := make([]ring.Descriptor, 64)
	seen := func(c *ring.Ring, want int, when string) {
		t.Helper()
		if n := c.Dequeue(out); n != want {
			t.Errorf("%s: the plugin sees %d descriptors, want %d", when, n, want)
		}
	}

	for range publishBurst - 1 {
		put(a, true)
	}
	seen(ca, 0, "a burst not yet full")
	put(a, true)
	seen(ca, publishBurst, "a full burst")

	put(a, true)
	put(a, true)
	seen(ca, 0, "two held")
	put(b, true)
	seen(ca, 2, "a put on another lane")
	seen(cb, 1, "the other lane's put, published with them")

	put(b, true)
	seen(cb, 0, "the other lane's next, held")
	put(b, false)
	seen(cb, 2, "the call's last request")

	put(a, true)
	sc.publishHeld()
	seen(ca, 1, "the call's end (publishHeld)")
	if sc.held != nil || sc.nHeld != 0 {
		t.Errorf("after publishHeld the call still holds %d on lane %v", sc.nHeld, sc.held)
	}
	sc.publishHeld() // nothing held: nothing to do
	seen(ca, 0, "publishHeld with nothing held")
}

// TestSubmitBurstLongerWhilePluginSleeps: while the plugin's side of a
// lane sleeps on its submission ring, a Submit call holds asleepBurst
// descriptors, not publishBurst, before it publishes (and so wakes it);
// the call's end publishes the rest. The plugin's side is a real
// consumer asleep on the lane's memfd ring (ring.Sleep).
func TestSubmitBurstLongerWhilePluginSleeps(t *testing.T) {
	l, c := newBurstLane(t, 1, 256)
	var woke <-chan bool
	sleep := func() { woke = pluginSleeps(t, l, c) }
	var sc submitCtx
	put := func(more bool) {
		t.Helper()
		sc.more = more
		l.Begin()
		if err := l.Put(&ring.Descriptor{Op: ring.OpWrite, Length: 4096}, nil, 0); err != nil {
			t.Fatal(err)
		}
		sc.end(l)
	}
	out := make([]ring.Descriptor, 256)

	sleep()
	for range asleepBurst - 1 {
		put(true)
	}
	if c.Pending() {
		t.Fatalf("the plugin asleep sees descriptors after %d puts (publishBurst %d); want none before %d", asleepBurst-1, publishBurst, asleepBurst)
	}
	put(true)
	if !<-woke {
		t.Fatal("the plugin woke to nothing")
	}
	if n := c.Dequeue(out); n != asleepBurst {
		t.Fatalf("the plugin sees %d descriptors after a full burst; want %d", n, asleepBurst)
	}

	sleep()
	put(true)
	put(true)
	put(false) // the call's last request publishes what it holds
	if !<-woke {
		t.Fatal("the plugin woke to nothing")
	}
	if n := c.Dequeue(out); n != 3 {
		t.Fatalf("the plugin sees %d descriptors at the call's end; want 3", n)
	}
}

// TestSubmitBurstsOnTwoLanesDoNotDeadlock: two submitters whose calls
// alternate between the same two lanes, each holding one of them, never
// wait for each other (a put that publishes another lane's held
// descriptors does so with no lane's lock held). A plugin's consumer
// drains both rings meanwhile.
func TestSubmitBurstsOnTwoLanesDoNotDeadlock(t *testing.T) {
	var lanes [2]*progress.Lane
	var rings [2]*ring.Ring
	stuck := false // deadlocked: Close would wait for the lanes' locks too
	for k := range lanes {
		l, err := progress.NewLane(uint32(k+1), 64, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if !stuck {
				l.Close(false)
			}
		})
		if rings[k], err = ring.Attach(l.SQ.Mem()); err != nil {
			t.Fatal(err)
		}
		lanes[k] = l
	}
	const calls, perCall = 20000, 5
	stop := make(chan struct{})
	drained := make(chan struct{})
	go func() { // the plugin's side: take what is published
		defer close(drained)
		out := make([]ring.Descriptor, 64)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if rings[0].Dequeue(out)+rings[1].Dequeue(out) == 0 {
				runtime.Gosched() // leave the submitters the CPUs
			}
		}
	}()
	done := make(chan struct{}, 2)
	for w := range 2 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range calls {
				var sc submitCtx
				for k := range perCall {
					l := lanes[(w+k)%2] // the two submitters go the opposite ways
					sc.more = k < perCall-1
					l.Begin()
					if err := l.Put(&ring.Descriptor{Op: ring.OpWrite, Length: 4096}, nil, 0); err != nil {
						l.End()
						t.Error(err)
						return
					}
					sc.end(l)
				}
				sc.publishHeld()
			}
		}()
	}
	timeout := time.After(20 * time.Second)
	for range 2 {
		select {
		case <-done:
		case <-timeout:
			stuck = true
			t.Fatal("two submitters alternating between two lanes made no progress in 20s: deadlocked on the lanes' locks")
		}
	}
	close(stop)
	<-drained
}

// TestSubmitRunBurstPublishes: a run of requests put together
// (submitRun's endRun) counts as that many puts toward a burst: a full
// burst is published at once, a short run is held until the burst fills
// or the call ends, and a lane whose plugin sleeps holds runs until
// asleepBurst.
func TestSubmitRunBurstPublishes(t *testing.T) {
	l, c := newBurstLane(t, 1, 256)
	var sc submitCtx
	putRun := func(n int, more bool) {
		t.Helper()
		putRunOn(t, l, &sc, n, more)
	}
	out := make([]ring.Descriptor, 256)
	seen := func(want int, when string) {
		t.Helper()
		if n := c.Dequeue(out); n != want {
			t.Errorf("%s: the plugin sees %d descriptors, want %d", when, n, want)
		}
	}
	putRun(publishBurst, true)
	seen(publishBurst, "a full run")
	putRun(3, true)
	seen(0, "a short run")
	putRun(publishBurst-3, true)
	seen(publishBurst, "the run that fills the burst")
	putRun(2, false)
	seen(2, "the call's last run")

	woke := pluginSleeps(t, l, c)
	for range asleepBurst/publishBurst - 1 {
		putRun(publishBurst, true)
	}
	if c.Pending() {
		t.Fatalf("the plugin asleep sees descriptors after %d; want none before %d", asleepBurst-publishBurst, asleepBurst)
	}
	putRun(publishBurst, true)
	if !<-woke {
		t.Fatal("the plugin woke to nothing")
	}
	seen(asleepBurst, "a sleeping plugin's full burst")
}

// TestSubmitExposedBurstIsFencedAtTheEnd: a full burst with more of the
// call to come is made visible to a polling plugin without a full
// barrier or a wakeup (Lane.EndExposed), so the call's end publishes
// again with both, though it adds nothing: a plugin that took the burst
// and went to sleep, or one that went to sleep before the burst's tail
// reached it, is woken then.
func TestSubmitExposedBurstIsFencedAtTheEnd(t *testing.T) {
	l, c := newBurstLane(t, 1, 64)
	var sc submitCtx
	putRunOn(t, l, &sc, publishBurst, true)
	out := make([]ring.Descriptor, 64)
	if n := c.Dequeue(out); n != publishBurst {
		t.Fatalf("a polling plugin sees %d descriptors of a full burst; want %d", n, publishBurst)
	}
	if sc.held != l {
		t.Fatal("after an exposed burst the call holds no lane: its end would not fence it")
	}
	woke := pluginSleeps(t, l, c)
	sc.publishHeld()
	select {
	case <-woke:
	case <-time.After(30 * time.Second):
		t.Fatal("the call's end did not wake a plugin asleep after an exposed burst")
	}
}
