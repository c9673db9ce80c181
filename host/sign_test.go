package host_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	hclog "github.com/hashicorp/go-hclog"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/metastore/metastoretest"
	"github.com/ferrydev/ferry/host/segment"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

const signSecret = "sign-test-cluster-secret-0123456789"

func secretFile(t *testing.T, secret string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// signedEngine starts an engine named name with the cluster secret file
// secret ("" for none), on the embedded metastore or, with metaURL, on
// that one; its log goes to the returned LogBuffer.
func signedEngine(t *testing.T, name, secret, metaURL string, ttl time.Duration) (*host.Engine, *plugintest.LogBuffer, error) {
	t.Helper()
	cfg := config.Default(name)
	cfg.PluginDir = binDir
	cfg.ClusterSecretFile, cfg.ClusterSecret = secret, nil // this secret, or none: not Default's
	cfg.Metastore.TTL = ttl
	if metaURL != "" {
		cfg.Metastore.Kind, cfg.Metastore.URL, cfg.Metastore.Listen = config.MetastoreHTTP, metaURL, ""
	}
	logs := &plugintest.LogBuffer{}
	e, err := host.New(context.Background(), cfg,
		host.WithLogger(hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Info, Output: logs})))
	if err != nil {
		return nil, logs, err
	}
	t.Cleanup(func() { e.Close() })
	return e, logs, nil
}

func mustSignedEngine(t *testing.T, name, secret, metaURL string, ttl time.Duration) (*host.Engine, *plugintest.LogBuffer) {
	t.Helper()
	e, logs, err := signedEngine(t, name, secret, metaURL, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return e, logs
}

// metaDo is one request to an HTTP metastore over loopback, as an attacker
// who can reach it sends it.
func metaDo(t *testing.T, method, metaURL, key string, body []byte) (int, []byte) {
	t.Helper()
	code, b, _ := metastoretest.Do(t, method, metaURL, url.Values{"key": {key}}, body)
	return code, b
}

// fakeListener accepts and counts connections until the test ends: where
// a forged descriptor sends peers.
func fakeListener(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String(), accepted
}

// forge returns d redirected: every transport's endpoint at addr, and its
// buffers replaced by one at another address.
func forge(d *segment.Descriptor, addr string) *segment.Descriptor {
	f := *d
	f.Transports = make(map[string][]byte)
	for name := range d.Transports {
		f.Transports[name] = []byte(addr)
	}
	f.Buffers = []segment.Buffer{{Region: 99, Base: 0x7000_0000_0000, Length: 1 << 20, Perm: segment.PermRemoteReadWrite, Location: "cpu"}}
	return &f
}

// TestSignedDescriptorHijackRefused: with a cluster secret, a descriptor
// that someone who can reach the embedded metastore writes over a live
// engine's (pointing at a fake listener, unsigned or signed with another
// secret) changes nothing for the peer that has the segment open: its
// handle keeps the real buffers and its writes keep landing in the real
// engine, and the fake gets no connection. The owner logs the replacement
// and writes its descriptor back. A forged descriptor under a name no
// engine holds is refused by OpenSegment with an error naming the segment
// and the key. Each refusal is counted.
func TestSignedDescriptorHijackRefused(t *testing.T) {
	ctx := context.Background()
	secret := secretFile(t, signSecret)
	a, _ := mustSignedEngine(t, "sign-a", secret, "", 0)
	// An hour's lease: its refresh does not rewrite the key during the
	// test, so only the guard can repair it.
	b, blogs := mustSignedEngine(t, "sign-b", secret, a.MetastoreURL(), time.Hour)
	bmem, err := b.Allocate(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	base, err := b.Register(ctx, bmem, host.RemoteReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	seg, err := a.OpenSegment(ctx, "sign-b")
	if err != nil {
		t.Fatal(err)
	}
	local, err := a.Allocate(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Register(ctx, local, host.LocalOnly); err != nil {
		t.Fatal(err)
	}
	fake, accepted := fakeListener(t)
	key := segment.Key(config.DefaultMetastorePrefix, "sign-b")
	code, raw := metaDo(t, http.MethodGet, a.MetastoreURL(), key, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", key, code, raw)
	}
	real, err := segment.Decode(key, raw)
	if err != nil {
		t.Fatal(err)
	}
	unsigned, _ := forge(real, fake).Encode()
	other, err := segment.NewSigner([]byte("another-secret-not-the-cluster's"))
	if err != nil {
		t.Fatal(err)
	}
	badlySigned, _ := other.Encode(forge(real, fake))

	for i, forged := range [][]byte{unsigned, badlySigned} {
		refused, repaired := quick(a).DescriptorsRefused, quick(b).PublishRepairs
		if code, body := metaDo(t, http.MethodPut, a.MetastoreURL(), key, forged); code != http.StatusOK {
			t.Fatalf("forgery %d: PUT: %d %s", i, code, body)
		}
		changed := func() bool {
			retired, _, bufs, ok := host.SegmentHandle(a, seg.ID)
			return !ok || retired != "" || len(bufs) != 1 || bufs[0].Base != base
		}
		waitFor(t, 10*time.Second, "the peer's watch to see the forged descriptor", func() bool { return quick(a).DescriptorsRefused > refused || changed() })
		if changed() {
			retired, _, bufs, _ := host.SegmentHandle(a, seg.ID)
			t.Fatalf("forgery %d: the open handle took it: retired %q, buffers %+v; want the real buffer at %#x", i, retired, bufs, base)
		}
		waitFor(t, 10*time.Second, "the owner to repair its descriptor", func() bool { return quick(b).PublishRepairs > repaired })
		retired, _, bufs, ok := host.SegmentHandle(a, seg.ID)
		if !ok || retired != "" || len(bufs) != 1 || bufs[0].Base != base {
			t.Fatalf("forgery %d: the open handle changed: retired %q, buffers %+v; want the real buffer at %#x", i, retired, bufs, base)
		}
		src := local[:64<<10]
		rand.Read(src)
		if err := a.Transfer(ctx, host.Request{Op: host.Write, Local: src, Segment: seg.ID, Remote: base + 4096}); err != nil {
			t.Fatalf("forgery %d: write to the real engine: %v", i, err)
		}
		if !bytes.Equal(bmem[4096:4096+len(src)], src) {
			t.Fatalf("forgery %d: the write did not land in the real engine", i)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the fake listener got %d connections", n)
	}
	if !strings.Contains(blogs.String(), "replaced by someone else") {
		t.Fatalf("the owner did not log the replacement; its log:\n%s", blogs)
	}
	code, raw = metaDo(t, http.MethodGet, a.MetastoreURL(), key, nil)
	signer, _ := segment.NewSigner([]byte(signSecret))
	if d, err := signer.Decode(key, raw); code != http.StatusOK || err != nil || d.Incarnation != b.Incarnation() {
		t.Fatalf("after the repairs the key holds %d %q (%v); want the owner's signed descriptor", code, raw, err)
	}

	// A forged descriptor where no engine publishes is refused outright.
	ghostKey := segment.Key(config.DefaultMetastorePrefix, "sign-ghost")
	ghost := forge(real, fake)
	ghost.Name = "sign-ghost"
	gb, _ := ghost.Encode()
	if code, body := metaDo(t, http.MethodPut, a.MetastoreURL(), ghostKey, gb); code != http.StatusOK {
		t.Fatalf("PUT %s: %d %s", ghostKey, code, body)
	}
	refused := quick(a).DescriptorsRefused
	_, err = a.OpenSegment(ctx, "sign-ghost")
	if !errors.Is(err, host.ErrSegmentNotFound) || !errors.Is(err, segment.ErrUnsigned) ||
		!strings.Contains(err.Error(), `"sign-ghost"`) || !strings.Contains(err.Error(), ghostKey) {
		t.Fatalf("OpenSegment of a forged, unsigned descriptor: %v; want ErrSegmentNotFound naming the segment and %q", err, ghostKey)
	}
	if quick(a).DescriptorsRefused != refused+1 {
		t.Fatalf("DescriptorsRefused = %d, want %d", quick(a).DescriptorsRefused, refused+1)
	}
	if n := accepted.Load(); n != 0 {
		t.Fatalf("the fake listener got %d connections", n)
	}
}

// TestOwnDescriptorDeleteRepaired: a DELETE of an engine's key, or a
// garbage overwrite, by someone who can reach the metastore is logged and
// repaired at once, long before the lease's next refresh (the TTL is an
// hour here), so that a new peer still finds the engine.
func TestOwnDescriptorDeleteRepaired(t *testing.T) {
	ctx := context.Background()
	secret := secretFile(t, signSecret)
	a, alogs := mustSignedEngine(t, "sign-del", secret, "", time.Hour)
	key := segment.Key(config.DefaultMetastorePrefix, "sign-del")
	signer, _ := segment.NewSigner([]byte(signSecret))
	for _, attack := range []struct {
		name, method, log string
		body              []byte
	}{
		{"delete", http.MethodDelete, "was deleted by someone else", nil},
		{"garbage", http.MethodPut, "was replaced by someone else", []byte("garbage")},
	} {
		repaired := quick(a).PublishRepairs
		if code, body := metaDo(t, attack.method, a.MetastoreURL(), key, attack.body); code != http.StatusOK {
			t.Fatalf("%s: %d %s", attack.name, code, body)
		}
		waitFor(t, 10*time.Second, attack.name+": the engine to repair its descriptor", func() bool {
			code, raw := metaDo(t, http.MethodGet, a.MetastoreURL(), key, nil)
			d, err := signer.Decode(key, raw)
			return code == http.StatusOK && err == nil && d.Incarnation == a.Incarnation()
		})
		if quick(a).PublishRepairs <= repaired {
			t.Fatalf("%s: the descriptor is back but PublishRepairs did not count it", attack.name)
		}
		if !strings.Contains(alogs.String(), attack.log) {
			t.Fatalf("%s: not logged (%q); log:\n%s", attack.name, attack.log, alogs)
		}
	}
	b, _ := mustSignedEngine(t, "sign-del-peer", secret, a.MetastoreURL(), 0)
	seg, err := b.OpenSegment(ctx, "sign-del")
	if err != nil || seg.Incarnation != a.Incarnation() {
		t.Fatalf("a new peer after the attacks: %+v, %v", seg, err)
	}
}

// TestSquattedNameReclaimed: an entry written under an engine's name
// before it starts (a descriptor that is not validly signed, or garbage)
// does not stop it from starting when it has a cluster secret: the name
// is reclaimed, with a warning. A validly signed descriptor of a live
// engine still holds its name.
func TestSquattedNameReclaimed(t *testing.T) {
	ctx := context.Background()
	srv, err := metastore.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	secret := secretFile(t, signSecret)
	key := segment.Key(config.DefaultMetastorePrefix, "sign-squat")
	squat, _ := (&segment.Descriptor{Schema: segment.SchemaVersion, Name: "sign-squat", Incarnation: 42, MachineID: "x",
		Transports: map[string][]byte{"tcp": []byte("127.0.0.1:1")}}).Encode()
	for _, v := range [][]byte{squat, []byte("garbage")} {
		if code, body := metaDo(t, http.MethodPut, srv.URL(), key, v); code != http.StatusOK {
			t.Fatalf("PUT: %d %s", code, body)
		}
		e, logs, err := signedEngine(t, "sign-squat", secret, srv.URL(), 0)
		if err != nil {
			t.Fatalf("an engine with a secret, its name squatted by %q: %v", v, err)
		}
		if !strings.Contains(logs.String(), "reclaiming the engine's name") {
			t.Fatalf("the reclaim is not logged; log:\n%s", logs)
		}
		peer, _ := mustSignedEngine(t, "sign-squat-peer", secret, srv.URL(), 0)
		seg, err := peer.OpenSegment(ctx, "sign-squat")
		if err != nil || seg.Incarnation != e.Incarnation() {
			t.Fatalf("a peer opens the reclaimed name: %+v, %v", seg, err)
		}
		peer.Close()
		// A live, validly signed engine keeps its name.
		_, _, err = signedEngine(t, "sign-squat", secret, srv.URL(), 0)
		if !errors.Is(err, host.ErrInvalid) || !strings.Contains(err.Error(), "in use by a live engine") {
			t.Fatalf("a second engine under a live engine's name: %v; want ErrInvalid, in use", err)
		}
		e.Close()
	}
}

// TestNoSecretWarnsOnce: without a cluster secret the engine warns once,
// at start, in one line that lists what is open (the metastore, the
// control service, the tcp and shm plugins); nothing else warns.
func TestNoSecretWarnsOnce(t *testing.T) {
	e, logs := mustSignedEngine(t, "sign-nosecret", "", "", 0)
	var warns []string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "[WARN]") {
			warns = append(warns, l)
		}
	}
	if len(warns) != 1 {
		t.Fatalf("%d warnings, want 1; log:\n%s", len(warns), logs)
	}
	for _, want := range []string{"no cluster secret", "the metastore " + e.MetastoreURL() + " (", "the control service on " + e.ControlAddr() + " (", "the tcp and shm plugins ("} {
		if !strings.Contains(warns[0], want) {
			t.Errorf("the warning does not say %q: %s", want, warns[0])
		}
	}
}

// TestDefaultWarnsNothing: an engine from config.Default has the process's
// generated cluster secret, signs its descriptor and warns of nothing; a
// second one in the process shares the secret and reads the first's
// descriptor.
func TestDefaultWarnsNothing(t *testing.T) {
	t.Setenv(config.SecretFileEnv, "") // Default's own secret, not the one TestMain shares
	logs := &plugintest.LogBuffer{}
	log := hclog.New(&hclog.LoggerOptions{Name: "default", Level: hclog.Info, Output: logs})
	cfg := config.Default("default-a")
	cfg.PluginDir = binDir
	a, err := host.New(context.Background(), cfg, host.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cfg = config.Default("default-b")
	cfg.PluginDir = binDir
	cfg.Metastore = config.Metastore{Kind: config.MetastoreHTTP, URL: a.MetastoreURL()}
	b, err := host.New(context.Background(), cfg, host.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := b.OpenSegment(context.Background(), "default-a"); err != nil {
		t.Fatalf("an engine from Default opening another of the same process: %v", err)
	}
	if strings.Contains(logs.String(), "[WARN]") {
		t.Fatalf("engines from config.Default warned:\n%s", logs)
	}
	if !strings.Contains(logs.String(), "authenticated=true") {
		t.Fatalf("the tcp plugin of a Default engine does not authenticate its peers:\n%s", logs)
	}
}

// TestClusterSecretFileErrors: a secret file that is missing or too short
// stops the engine at start with an error naming the setting.
func TestClusterSecretFileErrors(t *testing.T) {
	for _, c := range []struct{ name, path, want string }{
		{"missing", filepath.Join(t.TempDir(), "absent"), "no such file"},
		{"short", secretFile(t, "short"), "too short"},
	} {
		_, _, err := signedEngine(t, "sign-badsecret", c.path, "", 0)
		if err == nil || !strings.Contains(err.Error(), "cluster_secret_file") || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%s: err = %v; want one naming cluster_secret_file and %q", c.name, err, c.want)
		}
	}
}
