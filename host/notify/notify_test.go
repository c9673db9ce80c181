package notify

import (
	"context"
	"errors"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/host/progress"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type stubSource struct{}

func (stubSource) Descriptor() ([]byte, error) { return []byte(`{"name":"x"}`), nil }
func (stubSource) Status() ([]byte, error)     { return []byte(`{}`), nil }

func start(t *testing.T, name string, inc uint64) *Service {
	t.Helper()
	s, err := Start(Config{Listen: "127.0.0.1:0", Name: name, Incarnation: inc, Buffer: 4, Source: stubSource{}, Log: hclog.NewNullLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

func receive(t *testing.T, s *Service) Notification {
	t.Helper()
	select {
	case n := <-s.Notifications():
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no notification within 10s")
	}
	return Notification{}
}

// TestSendOnceAndServe: a notification sent twice under one key is
// delivered once; one to another life of the receiver is refused; the
// control service serves its source's descriptor.
func TestSendOnceAndServe(t *testing.T) {
	ctx := context.Background()
	a, b := start(t, "a", 1), start(t, "b", 2)
	to := Target{Segment: 1, Name: "b", Control: b.Addr(), Incarnation: 2}
	key := a.NextKey()
	if key == a.NextKey() {
		t.Fatal("NextKey repeated a key")
	}
	for range 2 {
		if err := a.Send(ctx, to, Notification{Name: "n", Msg: []byte("hi")}, key); err != nil {
			t.Fatal(err)
		}
	}
	if n := receive(t, b); n.From != "a" || n.Name != "n" || string(n.Msg) != "hi" {
		t.Fatalf("received %+v", n)
	}
	stale := to
	stale.Incarnation = 9
	if err := a.Send(ctx, stale, Notification{Name: "n"}, a.NextKey()); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("send to another life: %v, want ErrUnreachable", err)
	}
	if st := b.Stats(); st.Received != 1 || st.Duplicates != 1 || st.Refused != 1 {
		t.Fatalf("receiver stats %+v, want 1 received, 1 duplicate, 1 refused", st)
	}
	if st := a.Stats(); st.Sent != 2 || st.SendFailed != 1 {
		t.Fatalf("sender stats %+v, want 2 sent, 1 failed", st)
	}
	c, err := a.Client(b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if d, err := c.Descriptor(ctx); err != nil || string(d) != `{"name":"x"}` {
		t.Fatalf("descriptor %q, %v", d, err)
	}
}

// TestSettle: a submission is notified once all its tasks completed, and
// never when one of them ended otherwise.
func TestSettle(t *testing.T) {
	a, b := start(t, "a", 1), start(t, "b", 2)
	to := []Target{{Segment: 1, Name: "b", Control: b.Addr(), Incarnation: 2}}
	tr := progress.NewTracker(0)
	batch, err := tr.Allocate(4)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		batch.Reserve(10, 0)
	}
	if err := a.Pend(batch, 0, 2, Notification{Name: "ok"}, to); err != nil {
		t.Fatal(err)
	}
	if err := a.Pend(batch, 2, 4, Notification{Name: "not-ok"}, to); err != nil {
		t.Fatal(err)
	}
	batch.Finish(0, progress.Completed, nil)
	batch.Finish(2, progress.Completed, nil)
	a.Settle(batch) // neither submission has ended
	if st := a.Stats(); st.NotSent != 0 || st.Sent != 0 {
		t.Fatalf("stats %+v before the submissions ended", st)
	}
	batch.Finish(1, progress.Completed, nil)
	batch.Finish(3, progress.Failed, errors.New("boom"))
	if n := receive(t, b); n.Name != "ok" {
		t.Fatalf("received %+v, want the completed submission's", n)
	}
	select {
	case n := <-b.Notifications():
		t.Fatalf("also received %+v, from a submission with a failed task", n)
	default:
	}
	if st := a.Stats(); st.NotSent != 1 {
		t.Fatalf("stats %+v, want 1 not sent", st)
	}
	a.Close()
	if err := a.Pend(batch, 0, 1, Notification{Name: "late"}, to); !errors.Is(err, ErrClosed) {
		t.Fatalf("Pend after Close: %v, want ErrClosed", err)
	}
}

// TestCloseLetsSendsFinish: a notification whose submission completed is
// being sent when its engine closes: Close lets the send finish (within
// closeGrace) rather than cancel it, so the peer gets it and the sender
// counts it sent; a submission still pending at Close is not sent.
func TestCloseLetsSendsFinish(t *testing.T) {
	a, b := start(t, "a", 1), start(t, "b", 2)
	to := []Target{{Segment: 1, Name: "b", Control: b.Addr(), Incarnation: 2}}
	tr := progress.NewTracker(0)
	batch, err := tr.Allocate(2)
	if err != nil {
		t.Fatal(err)
	}
	batch.Reserve(10, 0)
	batch.Reserve(10, 0)
	if err := a.Pend(batch, 0, 1, Notification{Name: "landed"}, to); err != nil {
		t.Fatal(err)
	}
	if err := a.Pend(batch, 1, 2, Notification{Name: "pending"}, to); err != nil {
		t.Fatal(err)
	}
	batch.Finish(0, progress.Completed, nil)
	a.Settle(batch) // its send starts
	a.Close()
	if st := a.Stats(); st.Sent != 1 || st.SendFailed != 0 {
		t.Fatalf("sender stats after Close %+v, want the landed submission's notification sent and none failed", st)
	}
	if n := receive(t, b); n.Name != "landed" {
		t.Fatalf("received %+v, want the landed submission's", n)
	}
	select {
	case n := <-b.Notifications():
		t.Fatalf("also received %+v, from a submission still pending at Close", n)
	default:
	}
}
