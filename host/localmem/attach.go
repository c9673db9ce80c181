package localmem

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Plugins reach memory the application allocated itself with
// process_vm_readv/process_vm_writev, which the kernel allows only to a
// process that may ptrace the host. Plugins run as the host's user, so
// the classic check passes; what can forbid it is Yama's ptrace_scope and
// a host that is not dumpable.
//
// Under ptrace_scope 1 a process may attach only to its descendants, or
// to a process that named it (or one of its ancestors) with
// prctl(PR_SET_PTRACER). Yama's ptracer_exception_found checks the
// attacher with task_is_descendant(named, attacher), so the host names
// itself once: every descendant, which is every plugin and every run of a
// restarted one, is then covered, and no grant is needed after a restart.
// PR_SET_PTRACER_ANY would let any process of the user in; the host never
// uses it.

// AttachEnv is what the attach check reads and does: a seam for tests.
type AttachEnv struct {
	// Scope returns the content of /proc/sys/kernel/yama/ptrace_scope;
	// an error that is os.ErrNotExist means the kernel has no Yama.
	Scope func() ([]byte, error)
	// Dumpable reports prctl(PR_GET_DUMPABLE) != 0.
	Dumpable func() (bool, error)
	// Grant names this process its own ptracer: prctl(PR_SET_PTRACER,
	// getpid()).
	Grant func() error
}

// SystemAttach is the AttachEnv of this process.
func SystemAttach() AttachEnv {
	return AttachEnv{
		Scope: func() ([]byte, error) { return os.ReadFile("/proc/sys/kernel/yama/ptrace_scope") },
		Dumpable: func() (bool, error) {
			v, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0)
			return v != 0, err
		},
		Grant: func() error { return unix.Prctl(unix.PR_SET_PTRACER, uintptr(os.Getpid()), 0, 0, 0) },
	}
}

// ErrAttachDenied: this system forbids the plugins to reach memory the
// application allocated itself.
var ErrAttachDenied = errors.New("cross-memory attach not permitted")

// AttachVerdict decides, from the Yama scope (the file's content; yama
// false when the file does not exist) and whether the host is dumpable,
// whether plugins can reach this process's memory, and whether the host
// must grant them with PR_SET_PTRACER first. It is pure.
func AttachVerdict(yama bool, scope string, dumpable bool) (grant bool, err error) {
	const fix = "allocate transfer buffers with Engine.Allocate (shared memory, no attach needed)"
	if !dumpable {
		return false, fmt.Errorf("%w: this process is not dumpable (prctl PR_SET_DUMPABLE 0, or it changed credentials), so no plugin may read its memory; %s", ErrAttachDenied, fix)
	}
	if !yama {
		return false, nil
	}
	switch strings.TrimSpace(scope) {
	case "0":
		return false, nil
	case "1":
		return true, nil
	case "2":
		return false, fmt.Errorf("%w: kernel.yama.ptrace_scope is 2 (only CAP_SYS_PTRACE may attach) and plugins do not run with it; "+
			"set sysctl kernel.yama.ptrace_scope=1 (or 0), or %s", ErrAttachDenied, fix)
	case "3":
		return false, fmt.Errorf("%w: kernel.yama.ptrace_scope is 3 (attach disabled until reboot); %s", ErrAttachDenied, fix)
	}
	return false, fmt.Errorf("%w: kernel.yama.ptrace_scope reads %q, which this engine does not know; set it to 1 (or 0), or %s", ErrAttachDenied, strings.TrimSpace(scope), fix)
}

// checkAttach runs the attach check against env and grants the plugins
// when the scope needs it. A grant that fails is an error: without it,
// scope 1 refuses every copy.
func checkAttach(env AttachEnv) error {
	raw, err := env.Scope()
	yama := true
	if errors.Is(err, os.ErrNotExist) {
		yama = false
	} else if err != nil {
		return fmt.Errorf("%w: read kernel.yama.ptrace_scope: %w", ErrAttachDenied, err)
	}
	dumpable, err := env.Dumpable()
	if err != nil {
		return fmt.Errorf("%w: prctl PR_GET_DUMPABLE: %w", ErrAttachDenied, err)
	}
	grant, err := AttachVerdict(yama, string(raw), dumpable)
	if err != nil || !grant {
		return err
	}
	if err := env.Grant(); err != nil {
		return fmt.Errorf("%w: kernel.yama.ptrace_scope is 1 and prctl PR_SET_PTRACER (naming this process, so that its plugins may attach) failed: %w", ErrAttachDenied, err)
	}
	return nil
}
