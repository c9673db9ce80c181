package metastore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	grpcbackoff "google.golang.org/grpc/backoff"
)

// EtcdOptions configures NewEtcd.
type EtcdOptions struct {
	// Endpoints are the cluster's client URLs, like http://10.0.0.1:2379
	// (or host:port); at least one.
	Endpoints []string
	Username  string // with Password: etcd authentication; "" without
	Password  string
	TLS       *tls.Config // nil: plain TCP
	// DialTimeout bounds connecting and NewEtcd's first check; 0 means 5s.
	DialTimeout time.Duration
}

// Etcd is a Backend on an etcd cluster (go.etcd.io/etcd/client/v3).
//
// PutLeased grants an etcd lease of ttl (rounded up to whole seconds; etcd
// may grant more), puts the key with it and refreshes the lease with
// KeepAliveOnce every ttl/3, checking that the key is still there. When the
// lease or the key is lost (it expired during an
// outage, or the cluster lost it) the keeper grants a new one and puts the
// current value again. Close revokes the lease, which deletes the key.
//
// Watch uses etcd's watch on the prefix from the revision at which it
// started. The client resumes a watch across reconnections by itself; when
// the watch is cancelled or compacted away the watcher starts a new one at
// the current revision and sends Resync.
type Etcd struct {
	opts   EtcdOptions
	name   string // "metastore etcd <endpoints>", for errors
	client *clientv3.Client
	g      *group
}

var _ Backend = (*Etcd)(nil)

// NewEtcd connects to the cluster and checks that an endpoint answers and
// that the credentials are accepted, all within DialTimeout. An endpoint
// that refuses connections fails at once.
func NewEtcd(ctx context.Context, opts EtcdOptions) (*Etcd, error) {
	name := "metastore etcd " + strings.Join(opts.Endpoints, ",")
	if len(opts.Endpoints) == 0 {
		return nil, errors.New("metastore etcd: no endpoints; set them like [\"http://127.0.0.1:2379\"]")
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	e := &Etcd{opts: opts, name: name, g: newGroup()}
	dctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	// The gRPC client waits for a connection until its deadline and then
	// reports only that; dialling first says why (refused, no route, ...).
	if err := probeTCP(dctx, opts.Endpoints); err != nil {
		return nil, e.errorf("connect", "", err)
	}
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   opts.Endpoints,
		Username:    opts.Username,
		Password:    opts.Password,
		TLS:         opts.TLS,
		DialTimeout: opts.DialTimeout,
		Context:     context.WithoutCancel(ctx),
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			// Reconnect within about a second of a restarted server, so a
			// lease is refreshed long before it expires.
			Backoff:           grpcbackoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: opts.DialTimeout,
		})},
	})
	if err != nil {
		return nil, e.errorf("connect", "", err)
	}
	e.client = c
	if _, err := c.Status(dctx, opts.Endpoints[0]); err != nil {
		c.Close()
		return nil, e.errorf("connect", "", err)
	}
	return e, nil
}

// probeTCP succeeds when any endpoint accepts a TCP connection.
func probeTCP(ctx context.Context, endpoints []string) error {
	var errs []error
	var d net.Dialer
	for _, ep := range endpoints {
		host := ep
		if strings.Contains(ep, "://") {
			u, err := url.Parse(ep)
			if err != nil {
				errs = append(errs, fmt.Errorf("endpoint %q: %w", ep, err))
				continue
			}
			if u.Scheme == "unix" || u.Scheme == "unixs" {
				return nil // not TCP; let the client try
			}
			host = u.Host
		}
		c, err := d.DialContext(ctx, "tcp", host)
		if err == nil {
			c.Close()
			return nil
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (e *Etcd) errorf(op, key string, cause error) error {
	hint := ""
	switch {
	case errors.Is(cause, syscall.ECONNREFUSED):
		hint = " (is etcd running there? check metastore.endpoints)"
	case errors.Is(cause, rpctypes.ErrAuthFailed), errors.Is(cause, rpctypes.ErrInvalidAuthToken),
		errors.Is(cause, rpctypes.ErrPermissionDenied), errors.Is(cause, rpctypes.ErrUserEmpty):
		hint = " (check metastore.username and metastore.password)"
	case errors.Is(cause, context.DeadlineExceeded):
		hint = " (no etcd endpoint answered in time)"
	}
	if key == "" {
		return fmt.Errorf("%s: %s: %w%s", e.name, op, cause, hint)
	}
	return fmt.Errorf("%s: %s key %q: %w%s", e.name, op, key, cause, hint)
}

// opCtx bounds a request that the caller did not bound: the client waits
// for a connection for as long as its context lets it.
func opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// Get implements Store.
func (e *Etcd) Get(ctx context.Context, key string) ([]byte, error) {
	if key == "" {
		return nil, e.errorf("GET", "", errEmptyKey)
	}
	ctx, cancel := opCtx(ctx)
	defer cancel()
	resp, err := e.client.Get(ctx, key)
	if err != nil {
		return nil, e.errorf("GET", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, e.errorf("GET", key, ErrNotFound)
	}
	v := resp.Kvs[0].Value
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// Put implements Store. The key is bound to no lease.
func (e *Etcd) Put(ctx context.Context, key string, value []byte) error {
	if key == "" {
		return e.errorf("PUT", "", errEmptyKey)
	}
	ctx, cancel := opCtx(ctx)
	defer cancel()
	if _, err := e.client.Put(ctx, key, string(value)); err != nil {
		return e.errorf("PUT", key, err)
	}
	return nil
}

// Delete implements Store.
func (e *Etcd) Delete(ctx context.Context, key string) error {
	if key == "" {
		return e.errorf("DELETE", "", errEmptyKey)
	}
	ctx, cancel := opCtx(ctx)
	defer cancel()
	if _, err := e.client.Delete(ctx, key); err != nil {
		return e.errorf("DELETE", key, err)
	}
	return nil
}

// PutLeased implements Leaser; see Etcd for how.
func (e *Etcd) PutLeased(ctx context.Context, key string, value []byte, ttl time.Duration) (Lease, error) {
	if key == "" {
		return nil, e.errorf("PUT", "", errEmptyKey)
	}
	if err := checkTTL(ttl); err != nil {
		return nil, e.errorf("PUT", key, err)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	var id clientv3.LeaseID // guarded by the lease's lock: keeper calls do not overlap
	grant := func(ctx context.Context) error {
		resp, err := e.client.Grant(ctx, secs)
		if err != nil {
			return e.errorf(fmt.Sprintf("grant a %ds lease for", secs), key, err)
		}
		id = resp.ID
		return nil
	}
	write := func(ctx context.Context, v []byte) error {
		ctx, cancel := opCtx(ctx)
		defer cancel()
		if id == 0 {
			if err := grant(ctx); err != nil {
				return err
			}
		}
		_, err := e.client.Put(ctx, key, string(v), clientv3.WithLease(id))
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			if err := grant(ctx); err != nil {
				return err
			}
			_, err = e.client.Put(ctx, key, string(v), clientv3.WithLease(id))
		}
		if err != nil {
			return e.errorf(fmt.Sprintf("PUT with lease %x", int64(id)), key, err)
		}
		return nil
	}
	refresh := func(ctx context.Context) (bool, error) {
		_, err := e.client.KeepAliveOnce(ctx, id)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			id = 0
			return true, nil
		}
		if err != nil {
			return false, e.errorf(fmt.Sprintf("keep lease %x alive for", int64(id)), key, err)
		}
		// The lease lives, but the key may not (deleted by hand): a
		// keepalive does not say, so look.
		resp, err := e.client.Get(ctx, key, clientv3.WithKeysOnly())
		if err != nil {
			return false, e.errorf("GET", key, err)
		}
		return len(resp.Kvs) == 0, nil
	}
	remove := func(ctx context.Context) error {
		if id == 0 {
			return e.Delete(ctx, key)
		}
		ctx, cancel := opCtx(ctx)
		defer cancel()
		_, err := e.client.Revoke(ctx, id)
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return e.errorf(fmt.Sprintf("revoke lease %x of", int64(id)), key, err)
		}
		return nil
	}
	return startLease(ctx, e.g, fmt.Sprintf("%s: lease on key %q", e.name, key), value, ttl,
		keeper{write: write, refresh: refresh, remove: remove})
}

// Watch implements Watcher; see Etcd for how.
func (e *Etcd) Watch(ctx context.Context, prefix string) (<-chan Event, error) {
	rev, err := e.revision(ctx, prefix)
	if err != nil {
		return nil, err
	}
	ch := make(chan Event, watchBuffer)
	err = e.g.goCtx(ctx, func(ctx context.Context) {
		defer close(ch)
		send := func(ev Event) bool { return sendEvent(ctx, ch, ev) }
		bo := backoff{min: 50 * time.Millisecond, max: 2 * time.Second}
		for {
			wctx, cancel := context.WithCancel(ctx)
			wch := e.client.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
			for resp := range wch {
				if resp.Canceled || resp.CompactRevision != 0 || resp.Err() != nil {
					break
				}
				bo.reset()
				for _, ev := range resp.Events {
					out := Event{Kind: Put, Key: string(ev.Kv.Key), Value: ev.Kv.Value}
					if ev.Type == mvccpb.DELETE {
						out = Event{Kind: Delete, Key: string(ev.Kv.Key)}
					} else if out.Value == nil {
						out.Value = []byte{}
					}
					if !send(out) {
						cancel()
						return
					}
				}
				rev = resp.Header.Revision
			}
			cancel()
			// The watch ended: changes since rev may be lost. Start again
			// at the current revision and say so.
			for {
				if !sleep(ctx, bo.next()) {
					return
				}
				r, err := e.revision(ctx, prefix)
				if err == nil {
					rev = r
					break
				}
			}
			if !send(Event{Kind: Resync}) {
				return
			}
		}
	})
	if err != nil {
		return nil, e.errorf("watch", prefix, err)
	}
	return ch, nil
}

// revision returns the store's current revision, read under prefix.
func (e *Etcd) revision(ctx context.Context, prefix string) (int64, error) {
	ctx, cancel := opCtx(ctx)
	defer cancel()
	resp, err := e.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, e.errorf("watch", prefix, err)
	}
	return resp.Header.Revision, nil
}

// Close stops the leases (their keys expire with their etcd leases) and
// watches started through e and closes the connection.
func (e *Etcd) Close() error {
	e.g.close()
	if err := e.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
		return e.errorf("close", "", err)
	}
	return nil
}
