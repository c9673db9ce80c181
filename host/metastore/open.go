package metastore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"time"
)

// Kinds of metastore that Open knows; they match the config file's
// metastore.kind.
const (
	KindEmbedded = "embedded" // serve a metastore from this process (Listen)
	KindHTTP     = "http"     // a remote HTTP metastore (NewHTTPClient)
	KindNone     = "none"     // no shared metastore: a map in this process (NewMemory); peers come from blobs or control addresses
	KindRedis    = "redis"    // NewRedis
	KindEtcd     = "etcd"     // NewEtcd
)

// Options says which metastore Open connects to. It mirrors the config
// file's metastore block; fields that a kind does not use are ignored.
type Options struct {
	Kind string

	Listen string // embedded: host:port to serve on
	// Server is the embedded server's quotas (embedded only).
	Server ServerOptions
	URL    string // http: like http://10.0.0.1:7070/metadata

	Address   string   // redis: host:port
	Endpoints []string // etcd: client URLs
	Username  string   // redis, etcd
	Password  string   // redis, etcd
	Database  int      // redis

	// TLS turns TLS on for redis and etcd. CAFile, when set, is a PEM file
	// of the certificate authorities to trust instead of the system's.
	// TLSConfig, when not nil, is used as is and overrides both.
	TLS       bool
	CAFile    string
	TLSConfig *tls.Config

	// DialTimeout bounds connecting (redis, etcd); 0 means 5s.
	DialTimeout time.Duration
	// PollInterval is how often polling watchers list (http, redis without
	// keyspace notifications); 0 means DefaultPollInterval.
	PollInterval time.Duration
}

// Open returns the Backend that opts describes, connected and checked
// (see NewRedis and NewEtcd; for KindHTTP, HTTPClient.Probe). For KindEmbedded it starts the server; the
// result then also has URL() and Addr(), and its Close stops the server.
// ctx bounds only the opening.
func Open(ctx context.Context, opts Options) (Backend, error) {
	tlsConf, err := opts.tlsConfig()
	if err != nil {
		return nil, err
	}
	switch opts.Kind {
	case KindEmbedded:
		srv, err := ListenWith(ctx, opts.Listen, opts.Server)
		if err != nil {
			return nil, err
		}
		return &Embedded{Backend: srv.Store(), srv: srv}, nil
	case KindHTTP:
		c, err := NewHTTPClient(opts.URL)
		if err != nil {
			return nil, err
		}
		c.PollInterval = opts.PollInterval
		if _, err := c.Probe(ctx); err != nil {
			c.Close()
			return nil, err
		}
		return c, nil
	case KindNone:
		return NewMemory(), nil
	case KindRedis:
		return NewRedis(ctx, RedisOptions{
			Addr:         opts.Address,
			Username:     opts.Username,
			Password:     opts.Password,
			DB:           opts.Database,
			TLS:          tlsConf,
			DialTimeout:  opts.DialTimeout,
			PollInterval: opts.PollInterval,
		})
	case KindEtcd:
		return NewEtcd(ctx, EtcdOptions{
			Endpoints:   opts.Endpoints,
			Username:    opts.Username,
			Password:    opts.Password,
			TLS:         tlsConf,
			DialTimeout: opts.DialTimeout,
		})
	}
	return nil, fmt.Errorf("metastore: unknown kind %q: want %q, %q, %q, %q or %q",
		opts.Kind, KindEmbedded, KindHTTP, KindNone, KindRedis, KindEtcd)
}

func (o Options) tlsConfig() (*tls.Config, error) {
	if o.TLSConfig != nil {
		return o.TLSConfig, nil
	}
	if !o.TLS {
		if o.CAFile != "" {
			return nil, fmt.Errorf("metastore %s: ca_file %q is set but TLS is off", o.Kind, o.CAFile)
		}
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("metastore %s: ca_file: %w", o.Kind, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("metastore %s: ca_file %s: %w", o.Kind, o.CAFile, errNoCerts)
		}
		conf.RootCAs = pool
	}
	return conf, nil
}

var errNoCerts = errors.New("no PEM certificates in it")

// Embedded is the Backend Open returns for KindEmbedded: the map of a
// server that this process runs.
type Embedded struct {
	Backend
	srv *HTTPServer
}

// URL returns the URL peers use to reach the server.
func (e *Embedded) URL() string { return e.srv.URL() }

// Addr returns the address the server listens on.
func (e *Embedded) Addr() string { return e.srv.Addr() }

// Close stops the server, its leases and watches.
func (e *Embedded) Close() error { return e.srv.Close() }
