package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"net"
	"strings"
	"testing"

	"gonum.org/v1/plot"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
)

// TestFillPattern: the pattern has no zero word, depends on the seed, is
// the same for the same seed, and reaches the last byte of an odd length.
func TestFillPattern(t *testing.T) {
	a, b, c := make([]byte, 4099), make([]byte, 4099), make([]byte, 4099)
	fillPattern(a, 1)
	fillPattern(b, 1)
	fillPattern(c, 2)
	if !bytes.Equal(a, b) {
		t.Fatal("two fillings with seed 1 differ")
	}
	if bytes.Equal(a, c) {
		t.Fatal("seeds 1 and 2 give the same filling")
	}
	for i := 0; i+8 <= len(a); i += 8 {
		if binary.LittleEndian.Uint64(a[i:]) == 0 {
			t.Fatalf("word at %d is zero", i)
		}
	}
	if bytes.Equal(a[4096:], []byte{0, 0, 0}) {
		t.Fatal("the 3 tail bytes were not written")
	}
	if bytes.Equal(a[:8], a[8:16]) {
		t.Fatal("neighbouring words are equal")
	}
}

// fakeRemote is a remote buffer held in this process; deliver stands in
// for Ferry's transfers.
type fakeRemote struct{ buf []byte }

func (f *fakeRemote) fillSource(seed uint64) error { fillPattern(f.buf, seed); return nil }
func (f *fakeRemote) fillDest(seed uint64) error   { fillPattern(f.buf, seed); return nil }
func (f *fakeRemote) sum() ([sha256.Size]byte, error) {
	return sha256.Sum256(f.buf), nil
}

// TestFerrySideVerify: after fill, the receiving side differs from the
// source until a transfer of that round reaches it, in both directions,
// and a round whose transfers did not happen is caught even though the
// previous one delivered.
func TestFerrySideVerify(t *testing.T) {
	for _, op := range []host.Op{host.Write, host.Read} {
		local, remote := make([]byte, 3*4096), &fakeRemote{buf: make([]byte, 3*4096)}
		f := &ferrySide{lay: ferryLayout{o: benchOpts{transport: "shm", op: op, size: 4096, batch: 3, threads: 1}}, local: local, remote: remote}
		deliver := func() {
			if op == host.Write {
				copy(remote.buf, local)
			} else {
				copy(local, remote.buf)
			}
		}
		if err := f.fill(0); err != nil {
			t.Fatal(err)
		}
		if err := f.verify(0); err == nil || !strings.Contains(err.Error(), "differ") {
			t.Fatalf("%s: verify before any transfer: %v, want a mismatch", opName(op), err)
		}
		deliver()
		if err := f.verify(0); err != nil {
			t.Fatalf("%s: verify after the transfer: %v", opName(op), err)
		}
		if err := f.fill(1); err != nil {
			t.Fatal(err)
		}
		if err := f.verify(1); err == nil {
			t.Fatalf("%s: round 2 moved nothing but verified", opName(op))
		}
		deliver()
		if err := f.verify(1); err != nil {
			t.Fatalf("%s: verify after round 2's transfer: %v", opName(op), err)
		}
	}
}

// TestMemcpyBaselineVerifies: the baseline's buffers hold written data,
// and verify fails until the round's copies ran.
func TestMemcpyBaselineVerifies(t *testing.T) {
	o := benchOpts{transport: "shm", op: host.Write, size: 8192, batch: 4, threads: 2}
	m, err := newMemcpyBaseline(o)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	for round := range 2 {
		if err := m.fill(round); err != nil {
			t.Fatal(err)
		}
		zero := make([]byte, len(m.src[0]))
		for th := range o.threads {
			if bytes.Equal(m.src[th], zero) || bytes.Equal(m.dst[th], zero) {
				t.Fatalf("round %d: stream %d's buffers are not written", round, th)
			}
		}
		if bytes.Equal(m.src[0], m.src[1]) {
			t.Fatal("both streams' sources hold the same bytes")
		}
		if err := m.verify(round); err == nil {
			t.Fatalf("round %d: verify before the copy passed", round)
		}
		for th := range o.threads {
			n, err := m.work(th)
			if err != nil || n != uint64(o.size)*uint64(o.batch) {
				t.Fatalf("work(%d) = %d, %v; want %d bytes", th, n, err, o.size*int64(o.batch))
			}
		}
		if err := m.verify(round); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
	}
}

// TestTCPBaselineVerifies runs the raw TCP baseline against an in-process
// peer: both directions move written data, and verify catches a round
// whose bytes did not travel.
func TestTCPBaselineVerifies(t *testing.T) {
	for _, op := range []host.Op{host.Write, host.Read} {
		o := benchOpts{transport: "tcp", op: op, size: 64 << 10, batch: 3, threads: 2}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- servePeer(ln, int(o.size)*o.batch) }()
		p, err := dialTCPBaseline(o, ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		for round := range 2 {
			if err := p.fill(round); err != nil {
				t.Fatal(err)
			}
			if err := p.verify(round); err == nil {
				t.Fatalf("%s round %d: verify before any transfer passed", opName(op), round)
			}
			for th := range o.threads {
				if n, err := p.work(th); err != nil || n != uint64(o.size)*uint64(o.batch) {
					t.Fatalf("%s: work(%d) = %d, %v", opName(op), th, n, err)
				}
			}
			if err := p.verify(round); err != nil {
				t.Fatalf("%s round %d: %v", opName(op), round, err)
			}
		}
		p.close()
		ln.Close()
		if err := <-served; err != nil {
			t.Fatalf("servePeer: %v", err)
		}
	}
}

// TestPeerRefusesOutOfBounds: the peer never reads or writes past its
// buffer, whatever the header says.
func TestPeerRefusesOutOfBounds(t *testing.T) {
	for _, h := range [][3]uint64{{peerWrite, 4096, 1}, {peerRead, 0, 4097}, {peerRead, 1 << 63, 1 << 63}, {9, 0, 0}} {
		a, b := net.Pipe()
		done := make(chan error, 1)
		go func() { done <- servePeerConn(b, 4096) }()
		var hdr [peerHeader]byte
		binary.LittleEndian.PutUint64(hdr[:], h[0])
		binary.LittleEndian.PutUint64(hdr[8:], h[1])
		binary.LittleEndian.PutUint64(hdr[16:], h[2])
		if _, err := a.Write(hdr[:]); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err == nil {
			t.Errorf("header %v: the peer served it", h)
		}
		a.Close()
		b.Close()
	}
}

// TestSweepPlotAxes: a sweep whose throughput spans decades is drawn on
// a logarithmic throughput axis, as its sizes and latencies are; one
// within a decade keeps a linear one.
func TestSweepPlotAxes(t *testing.T) {
	row := func(size int64, gbps, base, p50 float64) benchRow {
		return benchRow{Transport: "tcp", Op: "write", BlockSize: size, Gbps: gbps, BaselineGbps: base, Baseline: "raw-go-tcp", P50us: p50, BaselineP50us: p50 / 2}
	}
	wide := []benchRow{row(4<<10, 0.08, 0.4, 30), row(1<<20, 1.9, 4.4, 500), row(64<<20, 3.1, 4.6, 20000)}
	narrow := []benchRow{row(1<<20, 1.9, 4.4, 500), row(4<<20, 2.5, 4.5, 900)}
	for _, c := range []struct {
		rows           []benchRow
		logGbps, logUs bool
	}{{wide, true, true}, {narrow, false, false}} {
		panels, err := sweepPlots(c.rows)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{c.logGbps, c.logUs} {
			if _, got := panels[i].Y.Scale.(plot.LogScale); got != want {
				t.Errorf("%d rows from %s: panel %d (%s) log %v, want %v", len(c.rows), sizeLabel(c.rows[0].BlockSize), i, panels[i].Y.Label.Text, got, want)
			}
			if _, ok := panels[i].X.Scale.(plot.LogScale); !ok {
				t.Errorf("panel %d: the size axis is not logarithmic", i)
			}
		}
	}
}

// TestBenchTable: a sweep's rows line up with their header, however
// wide their figures; a row without a baseline (--target) and a rail
// whose bandwidth was not learnt (one rail) print n/a, not 0.000.
func TestBenchTable(t *testing.T) {
	rows := []benchRow{
		{Transport: "tcp", Op: "write", BlockSize: 4096, Batch: 1, Threads: 1, Gbps: 0.089, P50us: 25.7, P99us: 172.7, P999us: 773,
			Baseline: "raw-go-tcp", BaselineGbps: 0.237, BaselineP50us: 8.9, Ratio: 0.376, Verified: true},
		{Transport: "tcp", Op: "write", BlockSize: 64 << 20, Batch: 16, Threads: 4, Gbps: 11.5, P50us: 123456.7, P99us: 2345678.9, P999us: 3456789.1,
			Baseline: "raw-go-tcp", BaselineGbps: 12.25, BaselineP50us: 100234.5, Ratio: 0.94, Verified: true},
	}
	var b strings.Builder
	printTable(&b, rows, true)
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("sweep table of 2 rows has %d lines:\n%s", len(lines), b.String())
	}
	checkAligned(t, lines)

	target := benchRow{Transport: "tcp", Op: "read", BlockSize: 65536, Batch: 1, Threads: 1, Gbps: 1.2, P50us: 40, Verified: true,
		CtxSwitchesPerReq: map[string]float64{"engine": 1.5, "plugin:tcp": 2},
		Rails:             []railRow{{Index: 0, Name: "10.0.0.2:0", NUMANode: -1, Bytes: 1 << 30, Share: 1}}}
	b.Reset()
	printTable(&b, []benchRow{target}, false)
	out := b.String()
	if strings.Contains(out, "0.000") || strings.Count(out, notApplicable) != 6 || !strings.Contains(out, " 3.5 ") {
		t.Errorf("a --target row on one rail: want n/a for its 5 baseline figures (context switches too) and the rail's EWMA, its own 3.5 switches a request, no 0.000:\n%s", out)
	}
	checkAligned(t, strings.Split(out, "\n")[:2])
}

// checkAligned fails t unless every column of lines[1:] starts where the
// header's (lines[0]) does.
func checkAligned(t *testing.T, lines []string) {
	t.Helper()
	var starts []int
	for i := 1; i < len(lines[0]); i++ {
		if lines[0][i-1] == ' ' && lines[0][i] != ' ' && i >= 2 && lines[0][i-2] == ' ' {
			starts = append(starts, i)
		}
	}
	for _, l := range lines[1:] {
		for _, c := range starts {
			if c >= len(l) || l[c-1] != ' ' || l[c] == ' ' {
				t.Errorf("row %q: no column starts at %d, where the header's does:\n%s", l, c, strings.Join(lines, "\n"))
				break
			}
		}
	}
}

// TestBenchProgressLive: on a terminal each phase rewrites one line, and
// a row's end clears it and, in a sweep, leaves the row's figures.
func TestBenchProgressLive(t *testing.T) {
	var b strings.Builder
	p := &benchProgress{w: &b, live: true, rows: 2}
	p.startRow(0, 4096)
	p.phase("starting the engines")
	p.phase("Ferry, round 1 of 2")
	p.rowDone(benchRow{Transport: "shm", Op: "read", Gbps: 1.5, P50us: 3, Verified: true}, nil)
	got := b.String()
	for _, want := range []string{"\r\x1b[Kferry bench [1/2] 4KiB: starting the engines (", "\r\x1b[Kferry bench [1/2] 4KiB: Ferry, round 1 of 2 (",
		"\r\x1b[Kferry bench [1/2] 4KiB: shm read 1.500 GB/s, p50 3.0 µs; verified ("} {
		if !strings.Contains(got, want) {
			t.Errorf("live progress %q lacks %q", got, want)
		}
	}
	if !strings.HasSuffix(got, "s)\n") {
		t.Errorf("live progress %q: the row's line does not end the line", got)
	}
	var quiet *benchProgress // off (--log-format json, --log-level off)
	quiet.startRow(0, 1)
	quiet.phase("x")
	quiet.rowDone(benchRow{}, nil)
}

// TestBuiltinConfigJoiningHasNoGeneratedSecret: the built-in config on
// its own carries the secret this process generated; joined to another
// metastore (--metastore) with no $FERRY_CLUSTER_SECRET_FILE, it carries
// none, since no member of that cluster could know a generated one; with
// the variable set, it carries that file.
func TestBuiltinConfigJoiningHasNoGeneratedSecret(t *testing.T) {
	t.Setenv(config.SecretFileEnv, "")
	alone, err := loadConfig("", "a", "")
	if err != nil || alone.ClusterSecret == nil {
		t.Fatalf("built-in config alone: secret %v, %v; want the generated one", alone.ClusterSecret != nil, err)
	}
	joined, err := loadConfig("", "a", "redis://127.0.0.1:6379")
	if err != nil || joined.ClusterSecret != nil || joined.ClusterSecretFile != "" {
		t.Fatalf("built-in config with --metastore: secret %v, file %q, %v; want none", joined.ClusterSecret != nil, joined.ClusterSecretFile, err)
	}
	t.Setenv(config.SecretFileEnv, "/run/ferry/secret")
	joined, err = loadConfig("", "a", "etcd://127.0.0.1:2379")
	if err != nil || joined.ClusterSecretFile != "/run/ferry/secret" {
		t.Fatalf("built-in config with --metastore and $%s: file %q, %v", config.SecretFileEnv, joined.ClusterSecretFile, err)
	}
}
