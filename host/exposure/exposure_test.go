package exposure

import (
	"strings"
	"testing"

	"github.com/ferrydev/ferry/config"
)

// The warning names each open part once, and only the plugins whose
// blocks name no secret of their own.
func TestWarning(t *testing.T) {
	cfg := config.Default("w")
	cfg.Plugins = append(cfg.Plugins,
		config.Plugin{Name: "nvlink", Enabled: true, Body: []byte(`cluster_secret_file = "/etc/ferry/secret"`)},
		config.Plugin{Name: "fault", Enabled: false})
	o := Of(cfg, "http://127.0.0.1:7070", "127.0.0.1:7071")
	if strings.Join(o.Plugins, " ") != "tcp shm" {
		t.Errorf("open plugins %q, want tcp and shm (nvlink names its secret, fault is off)", o.Plugins)
	}
	got := Warning(o)
	for _, want := range []string{
		"no cluster secret, so these are open to anyone who can reach them: ",
		"the metastore http://127.0.0.1:7070 (",
		"the control service on 127.0.0.1:7071 (",
		"the tcp and shm plugins (",
		"Set cluster_secret_file, the same file on every engine (for config.Default: $FERRY_CLUSTER_SECRET_FILE)",
	} {
		if strings.Count(got, want) != 1 {
			t.Errorf("the warning does not say %q once:\n%s", want, got)
		}
	}
	for _, not := range []string{"nvlink", "\n"} {
		if strings.Contains(got, not) {
			t.Errorf("the warning names %q:\n%s", not, got)
		}
	}
}

// Peer to peer there is no metastore to name; a redis one is named by
// its address; one plugin reads as one.
func TestOf(t *testing.T) {
	cfg := config.Default("w")
	cfg.Plugins = cfg.Plugins[:1]
	cfg.Metastore = config.Metastore{Kind: config.MetastoreNone}
	if got := Warning(Of(cfg, "", "10.0.0.1:7071")); strings.Contains(got, "metastore") || !strings.Contains(got, "the tcp plugin (") {
		t.Errorf("peer to peer, tcp only: %s", got)
	}
	cfg.Metastore = config.Metastore{Kind: config.MetastoreRedis, Address: "10.0.0.2:6379"}
	if o := Of(cfg, "", ""); o.Metastore != "redis 10.0.0.2:6379" {
		t.Errorf("redis metastore named %q, want %q", o.Metastore, "redis 10.0.0.2:6379")
	}
}
