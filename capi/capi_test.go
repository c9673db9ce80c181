package main_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ferrydev/ferry/host/metastore/metastoretest"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// bin holds the plugins, libferry.so and the compiled C programs.
var bin string

func TestMain(m *testing.M) {
	build := plugintest.Main{Binaries: []string{"ferry-plugin-shm", "ferry-plugin-tcp", "ferry-plugin-fault", "ferry-device-simdev"}}
	os.Exit(build.Run(m, func(dir string) {
		bin = dir
		// The C programs find the plugins as an embedding application
		// does: through $FERRY_PLUGIN_DIR.
		os.Setenv("FERRY_PLUGIN_DIR", dir)
		// Under make test, bin/ holds the library just built.
		if from := os.Getenv(plugintest.BinariesEnv); from != "" && os.Link(filepath.Join(from, "libferry.so"), filepath.Join(dir, "libferry.so")) == nil {
			return
		}
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(dir, "libferry.so"), ".")
		if out, err := cmd.CombinedOutput(); err != nil {
			os.Stderr.Write(out)
			os.Stderr.WriteString("building libferry.so: " + err.Error() + "\n")
			os.Exit(1)
		}
	}))
}

// compile builds examples/c/name.c with the system cc against
// include/ferry.h and the library.
func compile(t *testing.T, name string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	out := filepath.Join(bin, name)
	cmd := exec.Command(cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-I../include", "-o", out,
		filepath.Join("..", "examples", "c", name+".c"), "-L"+bin, "-lferry", "-lpthread", "-Wl,-rpath,"+bin)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, b)
	}
	return out
}

// run runs a compiled C program and returns its stdout; it fails the
// test when the program fails.
func run(t *testing.T, prog string, args ...string) string {
	t.Helper()
	stdout, stderr, err := runEnv(prog, nil, args...)
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", prog, err, stdout, stderr)
	}
	return stdout
}

// runEnv runs prog with env added to the test's environment.
func runEnv(prog string, env []string, args ...string) (stdout, stderr string, err error) {
	var o, e bytes.Buffer
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// TestCABI runs the C test: bad input at the boundary, then two
// processes with two engines moving verified bytes over shm and tcp with
// notifications, blobs and block lists (see examples/c/ferry_test.c).
func TestCABI(t *testing.T) {
	out := run(t, compile(t, "ferry_test"))
	for _, want := range []string{
		"ok: bad input at the boundary returns clear errors",
		"ok: two processes moved 65536 verified bytes over shm and tcp, notified on landing",
		"PASS",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the C test did not print %q:\n%s", want, out)
		}
	}
}

// TestCDevice runs examples/c/device_test.c: simulated GPU memory
// (plugins/simdev) allocated, mapped through its handle, registered and
// moved GPU to remote GPU and back, staged over tcp; bad registrations.
func TestCDevice(t *testing.T) {
	out := run(t, compile(t, "device_test"))
	if !strings.Contains(out, "device_test: ok") {
		t.Errorf("the C device test printed:\n%s", out)
	}
}

// TestCUpgrade runs examples/c/upgrade_test.c: ferry_upgrade_plugin of
// the tcp plugin to a copy at another path (pinned by its sha256) and
// back, under verified traffic; a missing binary and a wrong sha256 fail
// with their reason while the old plugin serves on.
func TestCUpgrade(t *testing.T) {
	out := run(t, compile(t, "upgrade_test"))
	if !strings.Contains(out, "upgrade_test: ok") || !strings.Contains(out, "none failed") {
		t.Errorf("the C upgrade test printed:\n%s", out)
	}
}

// TestCExample runs examples/c/move_block.c, the C version of the
// README's embedding example: its engines share a generated cluster secret
// (ferry_create_engine_with_secret), so that nothing warns.
func TestCExample(t *testing.T) {
	out, stderr, err := runEnv(compile(t, "move_block"), []string{"FERRY_LOG_LEVEL="})
	const want = "wrote 4096 bytes from prefill-0 to decode-0, verified on notification block-0 (layer 0) from prefill-0\n"
	if err != nil || out != want {
		t.Errorf("move_block: %v, printed %q, want %q; stderr:\n%s", err, out, want, stderr)
	}
	if stderr != "" {
		t.Errorf("move_block, at the default log level, wrote to stderr:\n%s", stderr)
	}
}

// TestCLogLevel: $FERRY_LOG_LEVEL sets the engines' log level ("off":
// nothing on stderr, where "info" says what the plugins listen on), and a
// level that is none fails the create with a message naming the variable.
func TestCLogLevel(t *testing.T) {
	prog := compile(t, "move_block")
	_, stderr, err := runEnv(prog, []string{"FERRY_LOG_LEVEL=off"})
	if err != nil || stderr != "" {
		t.Errorf("FERRY_LOG_LEVEL=off: %v, stderr %q", err, stderr)
	}
	_, stderr, err = runEnv(prog, []string{"FERRY_LOG_LEVEL=info"})
	if err != nil || !strings.Contains(stderr, "[INFO]") {
		t.Errorf("FERRY_LOG_LEVEL=info: %v, want info lines on stderr: %q", err, stderr)
	}
	_, stderr, err = runEnv(prog, []string{"FERRY_LOG_LEVEL=loud"})
	if err == nil || !strings.Contains(stderr, "create decode: FERRY_ERR_INVALID: ferry_create_engine_with_secret: invalid request: $FERRY_LOG_LEVEL is \"loud\"") {
		t.Errorf("FERRY_LOG_LEVEL=loud: %v, stderr %q", err, stderr)
	}
}

// buildMooncake builds bin/libferry-mooncake.so (capi/mooncake) as `make
// build` does, with the bin/libtransfer_engine.so link, and
// examples/c/mooncake_test.c against include/mooncake alone, linked
// -ltransfer_engine as a program built for Mooncake is.
func buildMooncake(t *testing.T) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-std=c11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden", "-I../include", "-I../include/mooncake",
			"-o", filepath.Join(bin, "libferry-mooncake.so"), filepath.Join("mooncake", "transfer_engine_c.c"),
			"-L" + bin, "-lferry", "-lpthread", "-ldl", "-Wl,-rpath," + bin},
		{"-std=c11", "-Wall", "-Wextra", "-Werror", "-I../include/mooncake", "-o", filepath.Join(bin, "mooncake_test"),
			filepath.Join("..", "examples", "c", "mooncake_test.c"), "-L" + bin, "-ltransfer_engine", "-Wl,-rpath," + bin},
	} {
		if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, b)
		}
		if err := os.Symlink("libferry-mooncake.so", filepath.Join(bin, "libtransfer_engine.so")); err != nil && !os.IsExist(err) {
			t.Fatal(err)
		}
	}
	return filepath.Join(bin, "mooncake_test")
}

// TestMooncakeCAPI runs examples/c/mooncake_test.c: Mooncake's classic C
// API (transfer_engine_c.h) on Ferry, called as NIXL's Mooncake backend
// calls it, two processes moving verified bytes; peer to peer
// ("P2PHANDSHAKE", as NIXL creates its engine) and through each metadata
// server Mooncake's connection string names: redis, etcd and Mooncake's
// HTTP metadata server. freeBatchID's BatchBusy is checked on a write that
// Ferry's fault plugin holds.
func TestMooncakeCAPI(t *testing.T) {
	prog := buildMooncake(t)
	cases := []struct {
		name string
		conn func(t *testing.T) string
	}{
		{"p2p", func(*testing.T) string { return "P2PHANDSHAKE" }},
		{"redis", func(t *testing.T) string { return "redis://" + metastoretest.NewRedis(t).Addr }},
		{"etcd", func(t *testing.T) string { return "etcd://" + metastoretest.NewEtcd(t).Addr }},
		{"mooncake-http", func(t *testing.T) string { return metastoretest.StartMooncake(t, metastoretest.MooncakeGo).URL }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			conn := c.conn(t)
			stdout, stderr, err := runEnv(prog, []string{"FERRY_LOG_LEVEL=error"}, conn)
			if err != nil {
				t.Fatalf("mooncake_test %s: %v\nstdout:\n%s\nstderr:\n%s", conn, err, stdout, stderr)
			}
			for _, want := range []string{
				"ok: bad input returns Mooncake's codes",
				"ok: two processes: 1048576 verified bytes written in 16 requests, notified",
				"ok: 1048576 verified bytes read back",
				"ok: LOCAL_SEGMENT write and notification verified",
				"ok: two peers of one host written in turn, each its own segment",
				"ok: freeBatchID of a batch in progress is BatchBusy; the batch stays",
				"mooncake_test: ok (" + conn + ")",
			} {
				if !strings.Contains(stdout, want) {
					t.Errorf("mooncake_test %s did not print %q:\n%s", conn, want, stdout)
				}
			}
		})
	}
}

// TestMooncakeHeader: include/mooncake/transfer_engine_c.h compiles as
// C++, as NIXL's backend includes it, and the library exports exactly
// Mooncake's 27 functions and ferry_mooncake_last_error.
func TestMooncakeHeader(t *testing.T) {
	buildMooncake(t)
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "c++"
	}
	cmd := exec.Command(cxx, "-fsyntax-only", "-Wall", "-Wextra", "-Werror", "-x", "c++", "-I../include/mooncake", "-")
	cmd.Stdin = strings.NewReader("#include \"transfer_engine_c.h\"\nint main() { transfer_request_t r = {OPCODE_WRITE, nullptr, LOCAL_SEGMENT, 0, 1}; return r.length == INVALID_BATCH; }\n")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the header as C++: %v\n%s", err, b)
	}
	out, err := exec.Command("nm", "-D", "--defined-only", filepath.Join(bin, "libferry-mooncake.so")).Output()
	if err != nil {
		t.Fatalf("nm: %v", err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[1] == "T" {
			got = append(got, f[2])
		}
	}
	slices.Sort(got)
	want := []string{"allocateBatchID", "closeSegment", "createTransferEngine", "destroyTransferEngine", "discoverTopology",
		"enableGracefulShutdown", "ferry_mooncake_last_error", "freeBatchID", "freeNotifsMsgBuf", "genNotifyInEngine",
		"getLocalIpAndPort", "getNicLoadStats", "getNotifsFromEngine", "getTransferStatus", "installTransport", "openSegment",
		"openSegmentNoCache", "registerLocalMemory", "registerLocalMemoryBatch", "removeLocalSegment", "showLinks",
		"submitTransfer", "submitTransferWithNotify", "syncSegmentCache", "uninstallTransport", "unregisterLocalMemory",
		"unregisterLocalMemoryBatch", "warmupEfaSegment"}
	if !slices.Equal(got, want) {
		t.Errorf("libferry-mooncake.so exports\n%v\nwant\n%v", got, want)
	}
}
