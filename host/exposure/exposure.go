// Package exposure words the one warning an engine without a cluster
// secret gives at start: what it leaves open, and to whom. Without a
// secret the metastore is trusted, the control service is unauthenticated
// and the transports take any peer that can reach them; the engine says so
// once, in one line, rather than once per part (the plugins log their own
// detail at info level).
//
// It owns the wording and the reading of which plugin blocks name their
// own secret; it must not decide whether the engine has a secret, read a
// secret, or start anything.
package exposure

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/ferrydev/ferry/config"
)

// Open is what an engine without a cluster secret exposes.
type Open struct {
	// Metastore is the metastore peers trust ("" for none: peer to
	// peer): its URL, or its kind and address.
	Metastore string
	// Control is the control service's address.
	Control string
	// Plugins are the enabled plugins whose blocks name no secret of
	// their own.
	Plugins []string
}

// Of is what an engine started from cfg without a cluster secret leaves
// open; metastoreURL is its metastore's URL when it has one, control its
// control service's address.
func Of(cfg *config.Config, metastoreURL, control string) Open {
	o := Open{Control: control}
	switch m := cfg.Metastore; {
	case m.Kind == config.MetastoreNone:
	case metastoreURL != "":
		o.Metastore = metastoreURL
	case m.URL != "":
		o.Metastore = m.URL
	case m.Address != "":
		o.Metastore = m.Kind + " " + m.Address
	case len(m.Endpoints) > 0:
		o.Metastore = m.Kind + " " + strings.Join(m.Endpoints, ",")
	default:
		o.Metastore = m.Kind
	}
	for _, pc := range cfg.Plugins {
		if pc.Enabled && !namesSecret(pc) {
			o.Plugins = append(o.Plugins, pc.Name)
		}
	}
	return o
}

// namesSecret reports whether a plugin's block sets cluster_secret or
// cluster_secret_file (the plugin validates them; a block that does not
// parse is the plugin's to report).
func namesSecret(pc config.Plugin) bool {
	if len(pc.Body) == 0 {
		return false
	}
	f, diags := hclsyntax.ParseConfig(pc.Body, pc.BodyFile, hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		return false
	}
	attrs := f.Body.(*hclsyntax.Body).Attributes
	return attrs["cluster_secret"] != nil || attrs["cluster_secret_file"] != nil
}

// Warning is the line the engine logs: what is open, what an attacker
// gets from each, and what to set.
func Warning(o Open) string {
	var parts []string
	if o.Metastore != "" {
		parts = append(parts, fmt.Sprintf("the metastore %s (whoever can write it can replace this engine's descriptor and redirect peers' transfers)", o.Metastore))
	}
	if o.Control != "" {
		parts = append(parts, fmt.Sprintf("the control service on %s (notifications in any peer's name, plugin status)", o.Control))
	}
	if n := len(o.Plugins); n > 0 {
		which := "the " + o.Plugins[0] + " plugin"
		if n > 1 {
			which = "the " + strings.Join(o.Plugins[:n-1], ", ") + " and " + o.Plugins[n-1] + " plugins"
		}
		parts = append(parts, which+" (any peer that reaches them may read and write the buffers registered for remote access; on loopback, any user of this machine)")
	}
	return "no cluster secret, so these are open to anyone who can reach them: " + strings.Join(parts, "; ") +
		". Set cluster_secret_file, the same file on every engine (for config.Default: $" + config.SecretFileEnv + ")"
}
