package host

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/sdk/kit"
)

// The cluster secret. One secret, shared by every engine of a cluster,
// authenticates what engines tell each other outside the data plane: it
// signs descriptors (presence.go) and MACs control calls and
// notifications (notify.go). The engine hands it to its plugins at start
// (sdk.StartConfig.ClusterSecret): the tcp and shm plugins authenticate
// their connections with it unless their own block names a secret.
//
// The engine's secret is Config.ClusterSecret (config.Default's
// generated one) or the top-level cluster_secret_file when set; else the
// tcp plugin's cluster_secret or cluster_secret_file, so that a
// cluster configured with a data-plane secret signs its descriptors and
// control calls too, without saying the secret twice.

// The shortest cluster secret, the tcp plugin's.
const minSecret = kit.MinSecretLen

// ClusterSecret returns the cluster secret an engine started from cfg
// uses, nil when none is configured: for a tool that talks to the
// engine's control service (`ferry plugins --engine`). Its errors name the
// setting and where it was written.
func ClusterSecret(cfg *config.Config) ([]byte, error) { return clusterSecret(cfg) }

func clusterSecret(cfg *config.Config) ([]byte, error) {
	if cfg.ClusterSecret != nil {
		return append([]byte(nil), cfg.ClusterSecret...), nil
	}
	if cfg.ClusterSecretFile != "" {
		b, err := readSecretFile(cfg.ClusterSecretFile)
		if err != nil {
			return nil, fmt.Errorf("cluster_secret_file: %w", err)
		}
		return b, nil
	}
	for _, pc := range cfg.Plugins {
		if pc.Name != "tcp" || !pc.Enabled || len(pc.Body) == 0 {
			continue
		}
		f, diags := hclsyntax.ParseConfig(pc.Body, pc.BodyFile, hcl.Pos{Line: pc.BodyLine, Column: pc.BodyColumn, Byte: pc.BodyByte})
		if diags.HasErrors() {
			return nil, fmt.Errorf("plugin %q config: %w", pc.Name, diags)
		}
		attrs := f.Body.(*hclsyntax.Body).Attributes
		if a := attrs["cluster_secret"]; a != nil {
			v, err := secretString(a)
			if err != nil || len(v) < minSecret {
				return nil, fmt.Errorf("%s: plugin %q: cluster_secret must be a string of at least %d bytes, the same on every engine", a.SrcRange, pc.Name, minSecret)
			}
			return []byte(v), nil
		}
		if a := attrs["cluster_secret_file"]; a != nil {
			path, err := secretString(a)
			if err != nil || path == "" {
				return nil, fmt.Errorf("%s: plugin %q: cluster_secret_file must name the file that holds the cluster secret", a.SrcRange, pc.Name)
			}
			if !filepath.IsAbs(path) && pc.BodyFile != "" {
				path = filepath.Join(filepath.Dir(pc.BodyFile), path)
			}
			b, err := readSecretFile(path)
			if err != nil {
				return nil, fmt.Errorf("%s: plugin %q: cluster_secret_file: %w", a.SrcRange, pc.Name, err)
			}
			return b, nil
		}
	}
	return nil, nil
}

func secretString(a *hclsyntax.Attribute) (string, error) {
	v, diags := a.Expr.Value(nil)
	if diags.HasErrors() {
		return "", diags
	}
	if v.IsNull() || !v.IsKnown() || v.Type() != cty.String {
		return "", errors.New("not a string")
	}
	return v.AsString(), nil
}

// readSecretFile reads a cluster secret file as the tcp plugin does.
func readSecretFile(path string) ([]byte, error) {
	return kit.ReadSecretFile(path, "make the file readable by the engine, or remove the setting")
}
