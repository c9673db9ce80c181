package progress

import (
	"context"
	"time"

	"github.com/ferrydev/ferry/host/waiting"
)

// WaitBatch waits until every task of b has ended, or until ctx ends: it
// then returns ctx's error and leaves b's tasks as they are (the caller
// cancels them). The tasks are on lanes (the engine picks them): the
// waiter polls them itself for its spin, then sleeps on b's wake, waking
// at b's deadlines to expire its tasks. What it does between polls, and
// how it holds the lanes meanwhile, is waiting.Decide's (role Batch).
//
// w holds the waiter's facts: Spin, SpinSmall, Small and Locked; the rest
// is filled in here.
func (t *Tracker) WaitBatch(ctx context.Context, b *Batch, lanes []*Lane, w waiting.Input) error {
	in := w
	in.Role = waiting.Batch
	in.Start = Now()
	in.Now, in.Deadline = in.Start, b.MinDeadline()
	// Hold the lanes as the wait begins, and look at once. A waiter that
	// does not reap them has their reapers woken now, rather than after a
	// publication's grace (Lane.End).
	first := waiting.Decide(in).Mark
	if first != waiting.Enter {
		for _, l := range lanes {
			l.Pay()
		}
	}
	mark := markLanes(lanes, waiting.None, first)
	defer func() { markLanes(lanes, mark, waiting.None) }()
	act := waiting.Decision{Act: waiting.Poll}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		in.Reaped = 0
		if act.Act == waiting.Sleep {
			var tc <-chan time.Time
			if act.Until != 0 {
				wait := time.Duration(act.Until - in.Now)
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				tc = timer.C
			}
			select {
			case <-b.Wake():
			case <-tc:
			case <-ctx.Done():
				return ctx.Err()
			}
		} else {
			if act.Act == waiting.Spin {
				yield(act.Yield)
			}
			for _, l := range lanes {
				in.Reaped += l.Poll(t)
			}
		}
		in.Now = Now()
		if b.Done(in.Now) {
			return nil
		}
		in.Deadline = b.MinDeadline()
		act = waiting.Decide(in)
		mark = markLanes(lanes, mark, act.Mark)
	}
}

// markLanes changes how a waiter holds lanes from one mark to another,
// and returns the new one.
func markLanes(lanes []*Lane, from, to waiting.Mark) waiting.Mark {
	if from == to {
		return to
	}
	for _, l := range lanes {
		switch from {
		case waiting.Enter:
			l.Leave()
		case waiting.Begin:
			l.WaitEnd()
		}
		switch to {
		case waiting.Enter:
			l.Enter()
		case waiting.Begin:
			l.WaitBegin()
		}
	}
	return to
}
