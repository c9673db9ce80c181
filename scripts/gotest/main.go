// Command gotest runs `go test -json` with its arguments and prints one
// line per package as it finishes, in the order they finish: `go test`'s
// own output keeps the package order, so one slow package early in the
// list hides every later result, and nothing at all is printed while the
// test binaries build. After each minute without a line it says what is
// still running; a failed test's output is printed as soon as it fails;
// the run ends with a summary and the slowest packages.
//
//	go run ./scripts/gotest -race -count=1 ./...
//
// Its exit status is go test's. It owns the formatting only: which tests
// run, and how, is go test's.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := exec.CommandContext(ctx, goCommand(), append([]string{"test", "-json"}, args...)...)
	cmd.Stderr = stderr
	// Interrupted, go test is told so and given time to stop its tests.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(stderr, "gotest: %v\n", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(stderr, "gotest: start go test: %v\n", err)
		return 2
	}
	r := NewReporter(stdout, time.Now())
	var mu sync.Mutex
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the heartbeat; stops when the output ends
		defer wg.Done()
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				mu.Lock()
				r.Tick(now)
				mu.Unlock()
			}
		}
	}()
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		mu.Lock()
		r.Line(sc.Bytes(), time.Now())
		mu.Unlock()
	}
	close(done)
	wg.Wait()
	if err := sc.Err(); err != nil {
		fmt.Fprintf(stderr, "gotest: reading go test's output: %v\n", err)
		io.Copy(io.Discard, out) // let go test finish writing
	}
	werr := cmd.Wait()
	code := 0
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee) && ee.ExitCode() > 0:
		code = ee.ExitCode()
	default:
		fmt.Fprintf(stderr, "gotest: go test: %v\n", werr)
		code = 2
	}
	if !r.Summary(time.Now()) && code == 0 {
		code = 1 // a failure go test itself did not exit for
	}
	return code
}

// goCommand is the go that runs this program when it runs under go run
// ($GOROOT/bin/go), else the one on PATH.
func goCommand() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := root + "/bin/go"; fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
