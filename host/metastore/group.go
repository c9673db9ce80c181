package metastore

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

var errClosed = errors.New("store is closed")

// group owns the background goroutines of one store (lease keepers,
// watchers). close cancels their context and waits for them, so that a
// closed store leaves nothing running.
type group struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

func newGroup() *group {
	ctx, cancel := context.WithCancel(context.Background())
	return &group{ctx: ctx, cancel: cancel}
}

// goCtx runs f in a goroutine with a context that ends when parent ends or
// the group closes. It fails once the group is closed.
func (g *group) goCtx(parent context.Context, f func(ctx context.Context)) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return errClosed
	}
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(g.ctx, cancel)
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		defer stop()
		defer cancel()
		f(ctx)
	}()
	return nil
}

func (g *group) close() {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.cancel()
	g.wg.Wait()
}

// backoff yields growing, jittered delays between retries.
type backoff struct {
	min, max time.Duration
	cur      time.Duration
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	// Up to 20% jitter, so that engines that lost the metastore together do
	// not come back in lockstep.
	return b.cur - time.Duration(rand.Int64N(int64(b.cur)/5+1))
}

func (b *backoff) reset() { b.cur = 0 }

// sleep waits d or until ctx ends; it reports whether the wait completed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
