package cpuslice

import (
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"
)

// onThreads runs f on n goroutines, each locked to its own OS thread at
// once (so that at least n threads exist, some started after the call),
// and returns what each read.
func onThreads(t *testing.T, n int, f func() (time.Duration, error)) []time.Duration {
	t.Helper()
	var (
		all   sync.WaitGroup
		ready sync.WaitGroup
		mu    sync.Mutex
		got   []time.Duration
		errs  []error
	)
	ready.Add(n)
	release := make(chan struct{})
	for range n {
		all.Add(1)
		go func() {
			defer all.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ready.Done()
			<-release // every goroutine holds its thread until all have one
			d, err := f()
			mu.Lock()
			got, errs = append(got, d), append(errs, err)
			mu.Unlock()
		}()
	}
	ready.Wait()
	close(release)
	all.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return got
}

func holdOrSkip(t *testing.T, d time.Duration) {
	t.Helper()
	err := Hold(d)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("not measurable here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func TestHoldSetsEveryThreadAndNewOnes(t *testing.T) {
	before, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	if before <= 200*time.Microsecond {
		t.Fatalf("the default slice reads %v: this test needs it longer than 200µs", before)
	}
	holdOrSkip(t, 200*time.Microsecond)
	if h := Held(); h != 200*time.Microsecond {
		t.Fatalf("Held() = %v after Hold(200µs)", h)
	}
	// Threads that exist now, and the ones the runtime starts for the
	// locked goroutines, all carry it.
	for i, d := range onThreads(t, 3*runtime.GOMAXPROCS(0)+4, Current) {
		if d != 200*time.Microsecond {
			t.Fatalf("thread %d: slice %v while held, want 200µs", i, d)
		}
	}
	Release()
	for i, d := range onThreads(t, 4, Current) {
		if d != before {
			t.Fatalf("thread %d: slice %v after Release, want the default %v", i, d, before)
		}
	}
}

func TestHoldsNestAndTheFirstSliceStays(t *testing.T) {
	holdOrSkip(t, 300*time.Microsecond)
	if err := Hold(time.Millisecond); err != nil || Held() != 300*time.Microsecond {
		t.Fatalf("second Hold: %v, held %v; want the first's 300µs kept", err, Held())
	}
	Release()
	if d, _ := Current(); d != 300*time.Microsecond {
		t.Fatalf("after one of two Releases: %v, want 300µs still", d)
	}
	Release()
	if d, _ := Current(); d == 300*time.Microsecond {
		t.Fatal("after both Releases the slice is still held")
	}
	Release() // one too many: nothing to do
}

func TestHoldClamps(t *testing.T) {
	holdOrSkip(t, time.Hour)
	defer Release()
	if h, d := Held(), mustCurrent(t); h != Max || d != Max {
		t.Fatalf("Hold(1h): held %v, the thread carries %v; want %v", h, d, Max)
	}
}

func mustCurrent(t *testing.T) time.Duration {
	t.Helper()
	d, err := Current()
	if err != nil {
		t.Fatal(err)
	}
	return d
}
