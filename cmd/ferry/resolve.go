package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/ferrydev/ferry/config"
	"github.com/ferrydev/ferry/host/metastore"
	"github.com/ferrydev/ferry/host/remotes"
	"github.com/ferrydev/ferry/host/segment"
)

// metastoreOptions is what metastore.Open takes for the metastore block
// m, as a client: an embedded block is read over HTTP at its listen
// address, where the engine that embeds it serves it.
func metastoreOptions(m config.Metastore) metastore.Options {
	if m.Kind == config.MetastoreEmbedded {
		h, port, err := net.SplitHostPort(m.Listen)
		if err == nil && port != "0" {
			if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
				h = "127.0.0.1"
			}
			return metastore.Options{Kind: metastore.KindHTTP, URL: "http://" + net.JoinHostPort(h, port) + metastore.Path}
		}
	}
	return metastore.Options{
		Kind: m.Kind, URL: m.URL, Address: m.Address, Endpoints: m.Endpoints, Username: m.Username, Password: m.Password,
		Database: m.Database, TLS: m.TLS, CAFile: m.CAFile,
	}
}

// resolveEngine returns the control address of engine: engine itself
// when it is one (host:port), else the control address that the engine
// of that name publishes in the metastore m (where says whose block it
// is: a file, or --metastore), its descriptor checked against secret
// when there is one.
func resolveEngine(ctx context.Context, engine string, m *config.Metastore, where string, secret []byte) (string, error) {
	if remotes.IsHostPort(engine) {
		return engine, nil
	}
	if m == nil {
		return "", fmt.Errorf("--engine %q is a name: give --config of a cluster member (its metastore block) or --metastore (%s) to look it up in, or give the engine's control address (host:port, its ready line's \"control\")",
			engine, config.MetastoreURLForms)
	}
	o := metastoreOptions(*m)
	switch {
	case o.Kind == config.MetastoreEmbedded:
		return "", fmt.Errorf("--engine %q is a name, and %s's metastore is embedded on port 0, which no one can look it up in: "+
			"give the engine's control address (host:port, its ready line's \"control\"), or --config of a cluster member (its metastore block), or --metastore (%s)",
			engine, where, config.MetastoreURLForms)
	case o.Kind == config.MetastoreNone:
		return "", fmt.Errorf("--engine %q is a name, and %s has no metastore (kind \"none\"): give the engine's control address (host:port), or --metastore (%s)",
			engine, where, config.MetastoreURLForms)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	b, err := metastore.Open(cctx, o)
	if err != nil {
		return "", fmt.Errorf("--engine %q: look it up in the %s metastore of %s: %w", engine, m.Kind, where, err)
	}
	defer b.Close()
	key := segment.Key(m.KeyPrefix(), engine)
	raw, err := b.Get(cctx, key)
	if errors.Is(err, metastore.ErrNotFound) {
		return "", fmt.Errorf("--engine %q: the %s metastore of %s has no descriptor at %q: is the engine running and publishing there (its name, the metastore's prefix)? Or give its control address (host:port)",
			engine, m.Kind, where, key)
	}
	if err != nil {
		return "", fmt.Errorf("--engine %q: read %q from the %s metastore of %s: %w", engine, key, m.Kind, where, err)
	}
	var signer *segment.Signer
	if len(secret) > 0 {
		if signer, err = segment.NewSigner(secret); err != nil {
			return "", fmt.Errorf("%s: %w", where, err)
		}
	}
	d, err := signer.Decode(key, raw)
	if err != nil {
		return "", fmt.Errorf("--engine %q: %w", engine, err)
	}
	if d.Control == "" {
		return "", fmt.Errorf("--engine %q: its descriptor at %q names no control address (an engine of a Ferry without a control service?): give its control address (host:port)", engine, key)
	}
	return d.Control, nil
}
