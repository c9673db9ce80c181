package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ferrydev/ferry/config"
)

// target is a `ferry run` child process: the far engine of bench and demo.
type target struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Scanner
	ready readyLine
}

// startTarget starts `ferry run` with args, waits for its ready line and
// keeps its stdin open: closing it (or this process dying) ends the child.
func startTarget(args ...string) (*target, error) {
	t, err := startSelf(append([]string{"run", "--control-stdin"}, args...), nil)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// startSelf starts this binary with args (a command and its flags),
// waits for the JSON line it prints when ready and decodes it into ready
// (t.ready when nil), and keeps its stdin open: closing it (or this
// process dying) ends the child.
func startSelf(args []string, ready any) (*target, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	env, forget, err := childSecretEnv()
	if err != nil {
		return nil, err
	}
	// The child has read the secret once it is ready (or gone).
	defer forget()
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s engine: %w", args[0], err)
	}
	t := &target{cmd: cmd, stdin: stdin, out: bufio.NewScanner(stdout)}
	if ready == nil {
		ready = &t.ready
	}
	t.out.Buffer(make([]byte, 64<<10), 1<<20)
	got := make(chan error, 1)
	go func() {
		if !t.out.Scan() {
			got <- fmt.Errorf("%s engine exited before it was ready (see its log above)", args[0])
			return
		}
		got <- json.Unmarshal(t.out.Bytes(), ready)
	}()
	select {
	case err = <-got:
	case <-time.After(60 * time.Second):
		err = fmt.Errorf("%s engine not ready after 60s", args[0])
	}
	if err != nil {
		t.stop()
		return nil, err
	}
	return t, nil
}

// ask sends one control line and returns the answer.
func (t *target) ask(line string) (string, error) {
	if _, err := fmt.Fprintln(t.stdin, line); err != nil {
		return "", err
	}
	if !t.out.Scan() {
		return "", fmt.Errorf("target engine gone")
	}
	ans := t.out.Text()
	if strings.HasPrefix(ans, "error:") {
		return "", fmt.Errorf("target: %s", ans)
	}
	return ans, nil
}

// stop ends the child and waits for it.
func (t *target) stop() {
	t.stdin.Close()
	done := make(chan struct{})
	go func() { t.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.cmd.Process.Kill()
		<-done
	}
}

// childSecretEnv is the environment of a child engine: this one's, with
// $FERRY_CLUSTER_SECRET_FILE naming a file (mode 0600, in a new directory)
// that holds this process's generated cluster secret unless it names one
// already, so that a child's engine from config.Default shares the secret
// of this process's (config.Default). forget removes the file.
func childSecretEnv() (env []string, forget func(), err error) {
	if os.Getenv(config.SecretFileEnv) != "" {
		return nil, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "ferry-secret-")
	if err != nil {
		return nil, nil, fmt.Errorf("a file for the child engine's cluster secret: %w", err)
	}
	file := filepath.Join(dir, "cluster-secret")
	if err := os.WriteFile(file, config.GeneratedSecret(), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("a file for the child engine's cluster secret: %w", err)
	}
	return append(os.Environ(), config.SecretFileEnv+"="+file), func() { os.RemoveAll(dir) }, nil
}
