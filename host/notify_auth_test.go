package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/control"
)

// These tests replay issue 11's attacks on the control service with real
// engines on loopback: an attacker is a plain control client that knows
// only what is public (names, incarnations, control addresses).

const testSecret = "notify-auth-test-secret-0123456789"

// newSecretEngine starts an engine with no metastore whose tcp plugin has
// the config body tcpBody (its listen address is added).
func newSecretEngine(t *testing.T, name, tcpBody string) *host.Engine {
	t.Helper()
	cfg := config.Default(name)
	cfg.PluginDir = binDir
	cfg.Metastore = config.Metastore{Kind: config.MetastoreNone}
	cfg.ClusterSecretFile, cfg.ClusterSecret = "", nil // the tcp block's secret, or none: not Default's
	cfg.Plugins[0].Body = []byte(`listen = ["127.0.0.1:0"]` + "\n" + tcpBody + "\n")
	e, err := host.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// openByControl opens b from a by b's control address.
func openByControl(t *testing.T, a, b *host.Engine) host.Segment {
	t.Helper()
	seg, err := a.OpenSegment(context.Background(), b.ControlAddr())
	if err != nil {
		t.Fatal(err)
	}
	return seg
}

func dialControl(t *testing.T, addr string, secret string) *control.Client {
	t.Helper()
	o := control.Options{}
	if secret != "" {
		o.Secret = []byte(secret)
	}
	c, err := control.DialOptions(addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestForgedNotificationRefused: with a cluster secret, a "blocks landed"
// notification in a real peer's name from someone without the secret (or
// with another one, or replayed from outside the window) is refused and
// counted, and never delivered; the real peer's notification is.
func TestForgedNotificationRefused(t *testing.T) {
	secret := `cluster_secret = "` + testSecret + `"`
	a, b := newSecretEngine(t, "auth-a", secret), newSecretEngine(t, "auth-b", secret)
	seg := openByControl(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	forged := control.Notification{From: "auth-a", FromIncarnation: a.Incarnation(), ToIncarnation: b.Incarnation(),
		Name: "blocks-landed", Msg: []byte("layer 0..31"), Key: "00112233445566778899aabbccddeeff"}
	late := dialControl(t, b.ControlAddr(), testSecret)
	for what, c := range map[string]*control.Client{
		"no secret":    dialControl(t, b.ControlAddr(), ""),
		"other secret": dialControl(t, b.ControlAddr(), "another-secret-0123456789abcdef"),
	} {
		if _, err := c.NotifyOnce(ctx, forged); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("forged notification, %s: %v; want Unauthenticated", what, err)
		}
	}
	// Signed with the secret but sent (or recorded) beyond the window.
	old := forged
	old.Key, old.Sent = "ffeeddccbbaa99887766554433221100", time.Now().Add(-control.ReplayWindow-time.Minute)
	if _, err := late.NotifyOnce(ctx, old); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("notification from outside the replay window: %v; want Unauthenticated", err)
	}
	if err := a.Notify(ctx, seg.ID, "blocks-landed", []byte("real")); err != nil {
		t.Fatal(err)
	}
	if n := expect(t, b); n.From != "auth-a" || string(n.Msg) != "real" {
		t.Fatalf("got %+v, want the real notification", n)
	}
	expectNone(t, b)
	if st := quick(b).Notifications; st.Forged != 3 || st.Received != 1 {
		t.Fatalf("receiver stats %+v, want 3 forged and 1 received", st)
	}
}

// TestPreKeyedNotificationsStillDelivered: an attacker who sends the keys
// a real sender is about to use (they were its public incarnation and a
// counter) must not make the receiver drop the real ones as duplicates.
// Without a secret the attacker's own notifications are delivered (they
// are unauthenticated, and the engine warned so), but all 30 real ones
// arrive too; with a secret the attacker's are refused.
func TestPreKeyedNotificationsStillDelivered(t *testing.T) {
	for _, tc := range []struct{ name, body string }{
		{"no secret", ""},
		{"secret", `cluster_secret = "` + testSecret + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newSecretEngine(t, "prekey-a", tc.body), newSecretEngine(t, "prekey-b", tc.body)
			seg := openByControl(t, a, b)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			const n = 30
			attacker := dialControl(t, b.ControlAddr(), "")
			refused := 0
			for i := 1; i <= n; i++ {
				_, err := attacker.NotifyOnce(ctx, control.Notification{From: "prekey-a", FromIncarnation: a.Incarnation(),
					ToIncarnation: b.Incarnation(), Name: "blocks-landed", Msg: []byte("fake"),
					Key: fmt.Sprintf("%x-%d", a.Incarnation(), i)})
				if status.Code(err) == codes.Unauthenticated {
					refused++
				} else if err != nil {
					t.Fatal(err)
				}
			}
			if want := map[bool]int{false: 0, true: n}[tc.body != ""]; refused != want {
				t.Fatalf("%d pre-keyed notifications refused, want %d", refused, want)
			}
			for i := 0; i < n; i++ {
				if err := a.Notify(ctx, seg.ID, "blocks-landed", []byte(fmt.Sprint("real ", i))); err != nil {
					t.Fatal(err)
				}
			}
			real := 0
			for real < n {
				got := expect(t, b)
				if strings.HasPrefix(string(got.Msg), "real ") {
					real++
				}
			}
			expectNone(t, b)
			if st := quick(a).Notifications; st.Sent != n {
				t.Fatalf("sender stats %+v, want %d sent", st, n)
			}
			if st := quick(b).Notifications; st.Duplicates != 0 {
				t.Fatalf("receiver took %d real notifications for duplicates: %+v", st.Duplicates, st)
			}
		})
	}
}

// TestFloodingSenderCannotStarveOthers: a peer flooding an engine whose
// application reads slowly keeps its buffer full and takes every slot the
// reader frees; a real sender's 20 notifications must all be taken (each
// within control.DefaultRetry's calls) and delivered anyway.
func TestFloodingSenderCannotStarveOthers(t *testing.T) {
	a, b := newSecretEngine(t, "flood-a", ""), newSecretEngine(t, "flood-b", "")
	seg := openByControl(t, a, b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	for g := 0; g < 4; g++ {
		c := dialControl(t, b.ControlAddr(), "")
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c.NotifyOnce(ctx, control.Notification{From: "flooder", FromIncarnation: 1, Name: "junk",
					Key: fmt.Sprintf("%d-%d", g, i)})
			}
		}()
	}
	// The flood has filled the buffer once refusals begin.
	for quick(b).Notifications.Refused == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the flood never filled the receiver's buffer")
		case <-time.After(10 * time.Millisecond):
		}
	}
	// The application reads slowly: one notification per 5 refused
	// calls, so that the flood outpaces it whatever this machine's speed.
	fromA := make(chan int, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		got, last := 0, quick(b).Notifications.Refused
		for got < 20 {
			r := quick(b).Notifications.Refused
			if r < last+5 {
				select {
				case <-stop:
					fromA <- got
					return
				case <-time.After(100 * time.Microsecond):
				}
				continue
			}
			last = r
			select {
			case n := <-b.Notifications():
				if n.From == "flood-a" {
					got++
				}
			case <-stop:
				fromA <- got
				return
			}
		}
		fromA <- got
	}()
	failed := 0
	for i := 0; i < 20; i++ {
		if err := a.Notify(ctx, seg.ID, "blocks-landed", []byte(fmt.Sprint(i))); err != nil {
			failed++
		}
	}
	if failed != 0 {
		t.Fatalf("the flood starved a real sender: %d of 20 notifications refused", failed)
	}
	select {
	case got := <-fromA:
		if got != 20 {
			t.Fatalf("%d of 20 notifications delivered", got)
		}
	case <-ctx.Done():
		t.Fatal("the 20 notifications were not all delivered")
	}
}

// TestOversizeNotificationStringsRefused: a sender, name or key over its
// bound is refused before the receiver remembers anything of it.
func TestOversizeNotificationStringsRefused(t *testing.T) {
	b := newSecretEngine(t, "big-b", "")
	c := dialControl(t, b.ControlAddr(), "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ok := control.Notification{From: strings.Repeat("f", control.MaxName), Name: strings.Repeat("n", control.MaxName),
		Key: strings.Repeat("k", control.MaxKey), ToIncarnation: b.Incarnation()}
	if _, err := c.NotifyOnce(ctx, ok); err != nil {
		t.Fatalf("strings at their bounds: %v", err)
	}
	expect(t, b)
	big := strings.Repeat("x", 60<<10)
	for what, n := range map[string]control.Notification{
		"sender one over":  {From: ok.From + "f", Name: "n", Key: "k1"},
		"sender 60 KiB":    {From: big, Name: "n", Key: "k2"},
		"name one over":    {From: "f", Name: ok.Name + "n", Key: "k3"},
		"name 60 KiB":      {From: "f", Name: big, Key: "k4"},
		"key one over":     {From: "f", Name: "n", Key: ok.Key + "k"},
		"key 60 KiB":       {From: "f", Name: "n", Key: big},
		"sender+key 30 KB": {From: big[:30<<10], Name: "n", Key: big[:30<<10]},
	} {
		if _, err := c.NotifyOnce(ctx, n); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%s: %v; want InvalidArgument", what, err)
		}
	}
	expectNone(t, b)
	if err := b.Notify(ctx, 1, ok.Name+"n", nil); !errors.Is(err, host.ErrInvalid) {
		t.Fatalf("sending a name over the bound: %v, want ErrInvalid", err)
	}
	if st := quick(b).Notifications; st.Invalid != 7 || st.Received != 1 {
		t.Fatalf("receiver stats %+v, want 7 invalid and 1 received", st)
	}
}

// TestControlStatusNeedsSecret: with a cluster secret (here from a
// cluster_secret_file), Status is refused to a caller without it, or with
// another one, and answered to one with it; without a secret it is
// answered as before.
func TestControlStatusNeedsSecret(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(testSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newSecretEngine(t, "status-a", fmt.Sprintf("cluster_secret_file = %q", file))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for what, secret := range map[string]string{"no secret": "", "other secret": "another-secret-0123456789abcdef"} {
		b, err := dialControl(t, e.ControlAddr(), secret).Status(ctx)
		if status.Code(err) != codes.Unauthenticated || b != nil {
			t.Fatalf("status, %s: %q, %v; want Unauthenticated", what, b, err)
		}
	}
	b, err := dialControl(t, e.ControlAddr(), testSecret).Status(ctx)
	if err != nil || !bytes.Contains(b, []byte(`"plugins"`)) {
		t.Fatalf("status with the secret: %s, %v", b, err)
	}
	if st := quick(e).Notifications; st.StatusDenied != 2 {
		t.Fatalf("stats %+v, want 2 status calls denied", st)
	}
	open := newSecretEngine(t, "status-open", "")
	if b, err := dialControl(t, open.ControlAddr(), "").Status(ctx); err != nil || !bytes.Contains(b, []byte(`"plugins"`)) {
		t.Fatalf("status without a secret: %s, %v", b, err)
	}
}
