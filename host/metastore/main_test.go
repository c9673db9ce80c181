package metastore

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ferrydev/ferry/sdk/plugintest"
)

// holderEnv, when set, makes the test binary a lease holder instead: it
// opens the store described by the JSON in the variable, takes a lease,
// prints "leased" and waits to be killed. The tests kill it with SIGKILL, so
// nothing deletes the key or refreshes the lease: the process is gone, as
// an engine that crashed.
const holderEnv = "FERRY_METASTORE_TEST_HOLDER"

type holderSpec struct {
	Options Options
	Key     string
	Value   string
	TTL     time.Duration
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(holderEnv); spec != "" {
		os.Exit(runHolder(spec))
	}
	code := m.Run()
	stopShared()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runHolder(spec string) int {
	var h holderSpec
	if err := json.Unmarshal([]byte(spec), &h); err != nil {
		fmt.Println("bad spec:", err)
		return 2
	}
	ctx := context.Background()
	s, err := Open(ctx, h.Options)
	if err != nil {
		fmt.Println("open:", err)
		return 1
	}
	if _, err := s.PutLeased(ctx, h.Key, []byte(h.Value), h.TTL); err != nil {
		fmt.Println("lease:", err)
		return 1
	}
	fmt.Println("leased")
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed
	return 0
}

// startHolder runs a lease holder process and waits until it holds the
// lease. Kill it with kill.
func startHolder(t *testing.T, h holderSpec) (kill func()) {
	t.Helper()
	spec, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	stdin, stdout := plugintest.StartPiped(t, cmd)
	killed := false
	kill = func() {
		if killed {
			return
		}
		killed = true
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
		stdin.Close()
	}
	t.Cleanup(kill)
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if strings.TrimSpace(line) != "leased" {
		kill()
		t.Fatalf("lease holder: %q, %v", line, err)
	}
	return kill
}
