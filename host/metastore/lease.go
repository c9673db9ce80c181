package metastore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// keeper is what a backend supplies to run a lease.
type keeper struct {
	// write stores value under the lease with the full ttl, creating the
	// key (and the backend's lease) if needed.
	write func(ctx context.Context, value []byte) error
	// refresh extends the lease. lost reports that the key or the
	// backend's lease is gone, so the value must be written again. nil
	// means refreshing is writing.
	refresh func(ctx context.Context) (lost bool, err error)
	// remove deletes the key and releases the lease.
	remove func(ctx context.Context) error
}

// lease runs a keeper: it refreshes every ttl/3, and after a failure
// retries with backoff and writes the current value again.
type lease struct {
	name string // "metastore <backend> <endpoint>: lease on key %q", for errors
	ttl  time.Duration
	k    keeper

	mu     sync.Mutex // serialises writes; guards value, dirty, closed
	value  []byte
	dirty  bool // the stored value may differ from value
	closed bool

	errc   chan error
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
	cerr   error
}

var _ Lease = (*lease)(nil)

func checkTTL(ttl time.Duration) error {
	if ttl < MinLeaseTTL {
		return fmt.Errorf("ttl %v is shorter than %v", ttl, MinLeaseTTL)
	}
	return nil
}

// startLease writes value and starts the keepalive goroutine in g.
func startLease(ctx context.Context, g *group, name string, value []byte, ttl time.Duration, k keeper) (*lease, error) {
	l := &lease{
		name:  name,
		ttl:   ttl,
		k:     k,
		value: append([]byte(nil), value...),
		errc:  make(chan error, 1),
		done:  make(chan struct{}),
	}
	if err := k.write(ctx, l.value); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	err := g.goCtx(lctx, func(ctx context.Context) {
		defer close(l.done)
		defer close(l.errc)
		l.run(ctx)
	})
	if err != nil {
		cancel()
		// Closed meanwhile: do not leave the key behind.
		rctx, rcancel := context.WithTimeout(context.Background(), ttl)
		defer rcancel()
		_ = k.remove(rctx)
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return l, nil
}

func (l *lease) run(ctx context.Context) {
	interval := l.ttl / 3
	bo := backoff{min: min(100*time.Millisecond, interval/4), max: interval}
	wait := interval
	for sleep(ctx, wait) {
		err := l.keepAlive(ctx, interval)
		if err == nil {
			bo.reset()
			wait = interval
			continue
		}
		if ctx.Err() != nil {
			return
		}
		select {
		case <-l.errc: // keep only the latest
		default:
		}
		l.errc <- err
		wait = bo.next()
	}
}

// keepAlive refreshes once; an attempt is bounded by timeout so that one
// hung request cannot outlast the lease.
func (l *lease) keepAlive(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	if !l.dirty && l.k.refresh != nil {
		lost, err := l.k.refresh(ctx)
		if err != nil {
			l.dirty = true
			return err
		}
		if !lost {
			return nil
		}
	}
	if err := l.k.write(ctx, l.value); err != nil {
		l.dirty = true
		return err
	}
	l.dirty = false
	return nil
}

func (l *lease) Update(ctx context.Context, value []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("%s: update: %w", l.name, errLeaseClosed)
	}
	l.value = append([]byte(nil), value...)
	if err := l.k.write(ctx, l.value); err != nil {
		l.dirty = true
		return err
	}
	l.dirty = false
	return nil
}

func (l *lease) Err() <-chan error { return l.errc }

func (l *lease) Close(ctx context.Context) error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		l.mu.Unlock()
		l.cancel()
		<-l.done
		l.cerr = l.k.remove(ctx)
	})
	return l.cerr
}

var errLeaseClosed = errors.New("lease is closed")
