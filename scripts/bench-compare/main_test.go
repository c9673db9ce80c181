package main

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want stat
	}{
		{[]float64{3, 1, 2}, stat{2, 1, 3}},
		{[]float64{4, 1, 3, 2}, stat{2.5, 1, 4}},
		{[]float64{7}, stat{7, 7, 7}},
	} {
		got, ok := summarize(tc.in)
		if !ok || got != tc.want {
			t.Errorf("summarize(%v) = %v, %v; want %v", tc.in, got, ok, tc.want)
		}
	}
	if _, ok := summarize(nil); ok {
		t.Error("summarize(nil) reported a figure")
	}
}

func TestMainRowsAndSkips(t *testing.T) {
	rows := mainRows([]string{"write"})
	if len(rows) != 2*4*2*2 {
		t.Fatalf("%d rows, want 32", len(rows))
	}
	const avail = 23 << 30
	var skipped []string
	for _, r := range rows {
		if why := skipReason(r, avail); why != "" {
			skipped = append(skipped, r.String()+": "+why)
		}
	}
	// 64 MiB × 128: 8 GiB a side (four of them) with one thread, 16 GiB
	// (refused by the bench) with two. Everything else is at most 256 MiB a side.
	if len(skipped) != 4 {
		t.Fatalf("skipped %d rows on 23 GiB, want the four 64MiB batch-128 rows:\n%s", len(skipped), strings.Join(skipped, "\n"))
	}
	for _, s := range skipped {
		if !strings.Contains(s, "/64MiB/b128/") {
			t.Errorf("skipped %s", s)
		}
	}
	if why := skipReason(row{"shm", "write", 64 << 20, 128, 1}, 64<<30); why != "" {
		t.Errorf("64MiB×128×1 on 64 GiB: %s; want it to run", why)
	}
	if why := skipReason(row{"shm", "write", 64 << 20, 128, 2}, 1<<40); !strings.Contains(why, "8 GiB") {
		t.Errorf("64MiB×128×2: %q; want the bench's 8 GiB limit", why)
	}
}

// TestRunInterleaves runs the loop against fake ferry builds that log
// each call and print a row: every build runs each row --runs times in
// the order A B A B, the raw lines reach --out, a failing run is counted
// and reported.
func TestRunInterleaves(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	fake := func(name, row string, code int) string {
		p := filepath.Join(dir, name)
		script := "#!/bin/sh\necho \"" + name + " $*\" >> " + calls + "\necho '" + row + "'\nexit " + string(rune('0'+code)) + "\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := fake("a", `{"gbps":2,"p50_us":10,"ratio":0.5,"latency_ratio":2,"baseline":"memcpy-1thread","baseline_gbps":4,"verified":true}`, 0)
	b := fake("b", `{"gbps":1,"p50_us":20,"ratio":0.25,"latency_ratio":4,"baseline":"memcpy-1thread","baseline_gbps":4}`, 0)
	out := filepath.Join(dir, "raw.jsonl")
	var table strings.Builder
	err := run([]string{"--bin", "a=" + a, "--bin", "b=" + b, "--runs", "2", "--duration", "10ms", "--rows", "^shm/write/4KiB/b1/", "--out", out, "--mem", "1"}, &table)
	if err != nil {
		t.Fatalf("run: %v\n%s", err, table.String())
	}
	got, _ := os.ReadFile(calls)
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	var order []string
	for _, l := range lines {
		order = append(order, l[:1])
		if !strings.Contains(l, "bench --transport shm --op write --size 4096 --batch 1 --threads") || !strings.Contains(l, "--duration 10ms --json") {
			t.Errorf("call %q", l)
		}
	}
	if strings.Join(order, "") != "abababab" {
		t.Errorf("call order %v, want a b a b per row (2 rows: threads 1 and 2)", order)
	}
	for _, want := range []string{"== shm/write/4KiB/b1/t1", "== shm/write/4KiB/b1/t2", "2.000 [2.000–2.000]", "0.250 [0.250–0.250]", "2/2", "not checked (old bench)"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); n++ {
		var r record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil || len(r.Row) == 0 || r.Error != "" {
			t.Errorf("raw line %q: %v", sc.Text(), err)
		}
	}
	if n != 8 {
		t.Errorf("%d raw lines, want 8", n)
	}

	bad := fake("c", `{"gbps":1,"verified":false}`, 1)
	table.Reset()
	err = run([]string{"--bin", "c=" + bad, "--runs", "1", "--duration", "10ms", "--rows", "^tcp/write/4KiB/b1/t1$", "--out", out, "--mem", "1"}, &table)
	if err == nil || !strings.Contains(err.Error(), "1 bench runs failed") {
		t.Errorf("a failing build: %v, want it counted", err)
	}
	if !strings.Contains(table.String(), "0 (+1 failed)") {
		t.Errorf("table does not show the failed run:\n%s", table.String())
	}
}
