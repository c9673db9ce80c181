package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/control"
)

// futureEngine is a control service that answers status in a format this
// ferry does not read, as an engine of another version would.
type futureEngine struct{}

func (futureEngine) Descriptor() ([]byte, error)        { return []byte("{}"), nil }
func (futureEngine) Identity() (string, uint64)         { return "future", 7 }
func (futureEngine) Status() ([]byte, error)            { return []byte(`{"format":99,"name":"future"}`), nil }
func (futureEngine) Deliver(control.Notification) error { return nil }

// TestStatusRefusesWhatItCannotRead: status against an engine of another
// status format, and against something that is not a Ferry engine, fails
// with an error that says which and what to do.
func TestStatusRefusesWhatItCannotRead(t *testing.T) {
	srv, err := control.Listen("127.0.0.1:0", futureEngine{}, control.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := control.DialOptions(srv.Addr(), control.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, _, err := fetchStatus(c, srv.Addr()); err == nil || !strings.Contains(err.Error(), "status format 99; this ferry reads formats 1 and 2") ||
		!strings.Contains(err.Error(), "engine's version") {
		t.Errorf("status of a future engine: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts and says nothing, then hangs up
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			conn.Close()
		}
	}()
	c2, err := control.DialOptions(ln.Addr().String(), control.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, _, err := fetchStatus(c2, ln.Addr().String()); err == nil || !strings.Contains(err.Error(), "is a Ferry engine serving its control service at "+ln.Addr().String()) {
		t.Errorf("status of a non-Ferry listener: %v", err)
	}
}

// TestPrintTraces: a story prints as one line a stage, with the
// selector's reasons under the route and the cause of a failed attempt.
func TestPrintTraces(t *testing.T) {
	var b strings.Builder
	printTraces(&b, []host.TaskTrace{{Batch: 3, Task: 1, Op: "write", Length: 4096, Priority: "normal", Done: true, Took: 42,
		Steps: []host.TraceStep{
			{Stage: "queued"},
			{Stage: "routed", At: 1.5, Transport: "shm", Reasons: "shm: taken (same machine)\ntcp: usable, a later attempt"},
			{Stage: "retried", At: 9, Attempt: 1, Transport: "tcp", From: "shm", Cause: "io"},
			{Stage: "ended", At: 42, Attempt: 1, State: "COMPLETED"},
		}}})
	out := b.String()
	for _, want := range []string{"task 1 of batch 3: write 4096 bytes", "ended in 42.0 µs", "routed    attempt 0  shm", "| shm: taken (same machine)", "| tcp: usable", "from shm  cause io", "state COMPLETED"} {
		if !strings.Contains(out, want) {
			t.Errorf("traces output lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	printTraces(&b, nil)
	if !strings.Contains(b.String(), "add a trace block") {
		t.Errorf("no traces: %q", b.String())
	}
}

// TestPrintFlows: `ferry status` shows the qos queue and its tenants,
// each receiver's credit, the notification counters and refused
// descriptors, and leaves out the parts an engine does not have.
func TestPrintFlows(t *testing.T) {
	st := host.EngineStatus{
		QoS:                host.QoSStatus{On: true, Held: 2, HeldTotal: 9, Dropped: 1, Bandwidth: 125e6, Tenants: []host.TenantStats{{Name: "decode", Admitted: 7, Rejected: 3, Bytes: 4096, Queued: 2}}},
		Credit:             []host.CreditStats{{Segment: "decode-0", Window: 1 << 20, Requests: 64, InUse: 4096, InFlight: 1, Grants: 5, Waits: 2}},
		Notifications:      host.NotificationStats{Sent: 4, Received: 6, Forged: 1},
		DescriptorsRefused: 3,
	}
	var b strings.Builder
	if err := printStatus(&b, st, nil, 0); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"qos: 2 held now, 9 held since start, 1 dropped while held, bandwidth 1.000 Gb/s", "decode  7         3         4096   2", "decode-0  1048576",
		"notifications: 4 sent", "6 received", "1 forged", "3 peer descriptors refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := printStatus(&b, host.EngineStatus{}, nil, 0); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); strings.Contains(out, "qos:") || strings.Contains(out, "receiver credit") || strings.Contains(out, "descriptors:") {
		t.Errorf("an engine without qos, credit or refused descriptors shows them:\n%s", out)
	}
}

// TestStatusReadsFormat1: a status of format 1 (an engine of the build
// before keys were all snake_case) reads as one of this format, its
// rails' pause times included.
func TestStatusReadsFormat1(t *testing.T) {
	old := `{"format":1,"name":"old","plugins":[{"name":"tcp","Counters":{"errors":3}}],` +
		`"rails":[{"transport":"tcp","index":0,"paused":true,"PausedUntil":"2026-12-05T06:00:00Z"}]}`
	st, err := decodeStatus([]byte(old), "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	if len(st.Plugins) != 1 || st.Plugins[0].Counters["errors"] != 3 || len(st.Rails) != 1 || !st.Rails[0].PausedUntil.Equal(want) {
		t.Errorf("format 1 status read as %+v", st)
	}
	cur := strings.NewReplacer(`"format":1`, `"format":2`, "Counters", "counters", "PausedUntil", "paused_until").Replace(old)
	if st, err := decodeStatus([]byte(cur), "127.0.0.1:1"); err != nil || st.Plugins[0].Counters["errors"] != 3 || !st.Rails[0].PausedUntil.Equal(want) {
		t.Errorf("format 2 status read as %+v, %v", st, err)
	}
}
