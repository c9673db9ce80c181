package simdev_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/plugins/simdev"
	"github.com/ferrydev/ferry/plugins/simdev/simmem"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/plugintest"
	"github.com/ferrydev/ferry/sdk/ring"
	"github.com/ferrydev/ferry/sdk/shm"
)

// started launches simdev with config body cfg and starts it.
func started(t *testing.T, cfg string) *pluginclient.DeviceClient {
	t.Helper()
	p := plugintest.LaunchDevice(t, binary)
	if err := p.Client.Start(t.Context(), sdk.StartConfig{Engine: t.Name(), Config: []byte(cfg)}); err != nil {
		t.Fatalf("start: %v", err)
	}
	return p.Client
}

// A handle of one simdev process opens in another (through /proc), and a
// copy there lands in the first one's allocation.
func TestImportFromAnotherProcess(t *testing.T) {
	owner, importer := started(t, ""), started(t, "")
	ctx := t.Context()
	a, err := owner.Allocate(ctx, 1, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	h := a.Handle
	h.Offset, h.Length = 100, 1000
	if err := importer.Import(ctx, 5, h); err != nil {
		t.Fatalf("import another simdev's handle: %v", err)
	}
	host, err := shm.Create("simdev-test", 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	copy(host.Mem(), bytes.Repeat([]byte("ferry"), 800))
	if err := importer.RegisterHost(ctx, 6, host.FD(), 0, 4096); err != nil {
		t.Fatal(err)
	}
	res, err := importer.Copy(ctx, []sdk.DeviceCopy{{Src: sdk.MemRef{Region: 6}, Dst: sdk.MemRef{Region: 5}, Length: 1000}})
	if err != nil || res[0].Status != ring.StatusOK {
		t.Fatalf("copy into the imported range: %v %v", res, err)
	}
	m, err := simmem.Open(a.Handle)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if !bytes.Equal(m.Bytes()[100:1100], host.Mem()[:1000]) || m.Bytes()[99] != 0 || m.Bytes()[1100] != 0 {
		t.Fatal("the copy did not land at the handle's offset of the owner's allocation")
	}
	if err := owner.Free(ctx, a.Addr); err != nil {
		t.Fatal(err)
	}
	if err := importer.Import(ctx, 7, h); !errors.Is(err, sdk.ErrStaleHandle) {
		t.Fatalf("import of another process's freed allocation: %v, want ErrStaleHandle", err)
	}
}

// The plugin's message crosses the boundary with the sentinel.
func TestSentinelKeepsTheMessage(t *testing.T) {
	dc := started(t, "")
	a, err := dc.Allocate(t.Context(), 0, 4096)
	if err != nil {
		t.Fatal(err)
	}
	_, err = dc.Identify(t.Context(), os.Getpid(), a.Addr+4000, 200)
	if !errors.Is(err, sdk.ErrNotDevice) || !strings.Contains(err.Error(), "runs 104 bytes past the end") {
		t.Fatalf("identify past an allocation's end: %v", err)
	}
}

// copy_bandwidth makes copies take their simulated time.
func TestCopyBandwidth(t *testing.T) {
	dc := started(t, `copy_bandwidth = "64MiB/s"`)
	ctx := t.Context()
	a, err := dc.Allocate(ctx, 0, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.Import(ctx, 1, a.Handle); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	var batch []sdk.DeviceCopy
	for i := range uint64(4) { // 4 x 2 MiB at 64 MiB/s: 125 ms whatever the workers
		batch = append(batch, sdk.DeviceCopy{Token: i, Src: sdk.MemRef{Region: 1, Offset: i << 21}, Dst: sdk.MemRef{Region: 1, Offset: (3 - i) << 21}, Length: 2 << 20})
	}
	if _, err := dc.Copy(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(begin); took < 120*time.Millisecond {
		t.Fatalf("8 MiB of copies at 64MiB/s took %v, want at least 125ms", took)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []string{`devices = 0`, `memory = "0"`, `copy_bandwidth = "2GB"`, `colour = "red"`} {
		p := plugintest.LaunchDevice(t, binary)
		err := p.Client.Start(t.Context(), sdk.StartConfig{Engine: "bad", Config: []byte(cfg), ConfigFile: "bad.hcl", ConfigLine: 1, ConfigColumn: 1})
		if err == nil || !strings.Contains(err.Error(), "bad.hcl:1") {
			t.Errorf("start with %s: %v, want an error located in bad.hcl", cfg, err)
		}
	}
}

// TestSettingsTable checks the table that declares the config body.
func TestSettingsTable(t *testing.T) {
	for _, p := range conf.Lint("simdev", simdev.Settings) {
		t.Error(p)
	}
}
