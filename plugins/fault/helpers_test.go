package fault_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ferrydev/ferry/internal/pluginclient"
	"github.com/ferrydev/ferry/sdk"
	"github.com/ferrydev/ferry/sdk/plugintest"
)

// binary is ferry-plugin-fault, built once by TestMain.
var binary string

func TestMain(m *testing.M) {
	build := plugintest.Main{Binaries: []string{"ferry-plugin-fault"}, CheckLeaks: true}
	os.Exit(build.Run(m, func(dir string) { binary = filepath.Join(dir, "ferry-plugin-fault") }))
}

// waitLimit is a safety net against a hang, never a synchronisation point.
const waitLimit = 30 * time.Second

// launch starts ferry-plugin-fault as engine name with config body cfg,
// driven through its rings by sdk/plugintest.
func launch(t testing.TB, name string, inc uint64, cfg string) *plugintest.Instance {
	t.Helper()
	return plugintest.Launch(t, binary, name, inc, []byte(cfg))
}

// startErr launches the plugin, starts it with cfg and returns Start's
// error.
func startErr(t *testing.T, cfg string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := pluginclient.Launch(ctx, binary, nil, nil)
	if err != nil {
		t.Fatalf("launch: %v", err)
	}
	defer func() { p.Kill(); <-p.Exited() }()
	_, err = p.Client.Start(ctx, sdk.StartConfig{Engine: "bad", Incarnation: 1, Config: []byte(cfg), ConfigFile: "bad.hcl", ConfigLine: 1, ConfigColumn: 1})
	return err
}
