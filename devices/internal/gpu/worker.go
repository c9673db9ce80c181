package gpu

import (
	"errors"
	"runtime"
	"sync"
)

// errStopped answers a call posted to a worker that has stopped.
var errStopped = errors.New("device plugin is stopped")

// job is one piece of work for a worker: run on the worker's thread, or
// abort (from any goroutine, no driver call) when the worker stops first.
type job struct {
	run   func()
	abort func()
}

// worker is the goroutine, locked to its OS thread, that runs every
// driver call for one device. Its queue is unbounded so that posting
// never blocks: Copy must not.
type worker struct {
	mu     sync.Mutex
	q      []job
	closed bool
	wake   chan struct{} // capacity 1: a post while the worker runs is not lost
	done   chan struct{}
}

// startWorker starts the worker and runs bind on its thread first; it
// returns bind's error (and the worker has then exited).
func startWorker(bind func() error) (*worker, error) {
	w := &worker{wake: make(chan struct{}, 1), done: make(chan struct{})}
	started := make(chan error, 1)
	go w.loop(bind, started)
	if err := <-started; err != nil {
		<-w.done
		return nil, err
	}
	return w, nil
}

func (w *worker) loop(bind func() error, started chan<- error) {
	defer close(w.done)
	// Never unlocked: the thread ends with the goroutine, and with it the
	// thread's current device.
	runtime.LockOSThread()
	if err := bind(); err != nil {
		started <- err
		return
	}
	started <- nil
	for {
		w.mu.Lock()
		for len(w.q) == 0 && !w.closed {
			w.mu.Unlock()
			<-w.wake
			w.mu.Lock()
		}
		q, closed := w.q, w.closed
		w.q = nil
		w.mu.Unlock()
		for _, j := range q {
			j.run()
		}
		if closed && len(q) == 0 {
			return
		}
	}
}

// post queues j; it reports false (and does not run j) after close.
func (w *worker) post(j job) bool {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return false
	}
	w.q = append(w.q, j)
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	return true
}

// call runs fn on the worker's thread and returns its error.
func (w *worker) call(fn func() error) error {
	res := make(chan error, 1)
	if !w.post(job{run: func() { res <- fn() }, abort: func() { res <- errStopped }}) {
		return errStopped
	}
	return <-res
}

// abortQueued takes the jobs not yet started off the queue and aborts
// them, on the calling goroutine.
func (w *worker) abortQueued() {
	w.mu.Lock()
	q := w.q
	w.q = nil
	w.mu.Unlock()
	for _, j := range q {
		j.abort()
	}
}

// close lets the worker finish what is queued, end, and waits for it.
func (w *worker) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	<-w.done
}

// pending is a copy submitted to a stream, waiting for its event.
type pending struct {
	ev     Event
	n      uint64
	finish func(err error, n uint64)
}

// lane is one stream and the goroutine that reports its copies.
type lane struct {
	stream Stream
	pend   chan pending
	done   chan struct{}
}

// laneDepth is how many copies a stream holds before the worker waits
// for the stream's completion goroutine: backpressure on the worker,
// never on Copy.
const laneDepth = 1024

// startLane starts the completion goroutine of stream s: it binds its
// thread with bind, waits on each pending event in order with wait,
// reports, and hands the event back with put.
func startLane(s Stream, bind func() error, wait func(Event) error, put func(Event)) (*lane, error) {
	l := &lane{stream: s, pend: make(chan pending, laneDepth), done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(l.done)
		runtime.LockOSThread()
		if err := bind(); err != nil {
			started <- err
			return
		}
		started <- nil
		for p := range l.pend {
			err := wait(p.ev)
			put(p.ev)
			p.finish(err, p.n)
		}
	}()
	if err := <-started; err != nil {
		<-l.done
		return nil, err
	}
	return l, nil
}

// stop ends the lane once every pending copy was reported.
func (l *lane) stop() {
	close(l.pend)
	<-l.done
}
