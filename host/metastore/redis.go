package metastore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// RedisOptions configures NewRedis.
type RedisOptions struct {
	Addr     string // host:port; required
	Username string // for Redis 6 ACLs; "" with a Password means the default user
	Password string
	DB       int         // database number
	TLS      *tls.Config // nil: plain TCP
	// DialTimeout bounds connecting, and NewRedis's first PING; 0 means 5s.
	DialTimeout time.Duration
	// Watch chooses how Watch learns of changes: WatchAuto (the default)
	// uses keyspace notifications and falls back to polling when the
	// server refuses CONFIG; WatchNotify and WatchPoll force one.
	Watch string
	// PollInterval is how often a polling Watch scans its prefix; 0 means
	// DefaultPollInterval.
	PollInterval time.Duration
}

// Watch modes of RedisOptions.Watch.
const (
	WatchAuto   = ""
	WatchNotify = "notify"
	WatchPoll   = "poll"
)

// Redis is a Backend on a Redis server (github.com/redis/go-redis/v9).
//
// Leases are keys with an expiry: PutLeased sets the key with SET PX ttl,
// and a goroutine refreshes it every ttl/3 with PEXPIRE; when the key is
// gone (the server restarted, or lost it) or a refresh failed, it SETs the
// current value again. A writer that dies stops refreshing and the key
// expires within ttl.
//
// Watch uses keyspace notifications: it makes sure the server's
// notify-keyspace-events includes "Kg$xe" (adding to what is set, with
// CONFIG SET; note that this changes the server's configuration, and that
// a restarted server forgets it, so the watch sets it again when it
// reconnects), subscribes to __keyspace@<db>__:<prefix>*, and reads the
// value back on every write. When CONFIG is refused (an ACL without
// +config, a managed Redis that renames the command) Watch polls instead:
// SCAN MATCH <prefix>* and GETRANGE every PollInterval, and reports the
// difference. Values are read with GETRANGE key 0 MaxValueSize, so that
// one over MaxValueSize is refused without being read whole
// (redisget.go).
type Redis struct {
	opts   RedisOptions
	name   string // "metastore redis <addr>", for errors
	client *redis.Client
	g      *group
}

var _ Backend = (*Redis)(nil)

// NewRedis connects to the Redis server of opts and checks it with a PING,
// so that an unreachable server or wrong credentials fail here, within
// DialTimeout.
func NewRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	name := "metastore redis " + opts.Addr
	if opts.Addr == "" {
		return nil, errors.New("metastore redis: no address; set it like 127.0.0.1:6379")
	}
	switch opts.Watch {
	case WatchAuto, WatchNotify, WatchPoll:
	default:
		return nil, fmt.Errorf("%s: watch mode %q: want %q, %q or %q", name, opts.Watch, WatchAuto, WatchNotify, WatchPoll)
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	r := &Redis{
		opts: opts,
		name: name,
		client: redis.NewClient(&redis.Options{
			Addr:            opts.Addr,
			Username:        opts.Username,
			Password:        opts.Password,
			DB:              opts.DB,
			TLSConfig:       opts.TLS,
			DialTimeout:     opts.DialTimeout,
			Protocol:        2,
			DisableIdentity: true,
			// Fail fast on a dead server: the callers (leases, watches,
			// the engine) retry with their own backoff.
			MaxRetries: 1,
			MaintNotificationsConfig: &maintnotifications.Config{
				Mode: maintnotifications.ModeDisabled,
			},
		}),
		g: newGroup(),
	}
	pctx, cancel := context.WithTimeout(ctx, opts.DialTimeout)
	defer cancel()
	if err := r.client.Ping(pctx).Err(); err != nil {
		r.client.Close()
		return nil, r.errorf("connect", "", err)
	}
	return r, nil
}

// errorf names the backend, the server, the operation and the key.
func (r *Redis) errorf(op, key string, cause error) error {
	hint := ""
	msg := cause.Error()
	switch {
	case errors.Is(cause, syscall.ECONNREFUSED):
		hint = " (is redis-server running there? check metastore.address)"
	case strings.HasPrefix(msg, "WRONGPASS"), strings.HasPrefix(msg, "NOAUTH"), strings.Contains(msg, "invalid password"):
		hint = " (check metastore.username and metastore.password)"
	}
	if key == "" {
		return fmt.Errorf("%s: %s: %w%s", r.name, op, cause, hint)
	}
	return fmt.Errorf("%s: %s key %q: %w%s", r.name, op, key, cause, hint)
}

// Get implements Store.
func (r *Redis) Get(ctx context.Context, key string) ([]byte, error) {
	if key == "" {
		return nil, r.errorf("GET", "", errEmptyKey)
	}
	v, err := r.getBounded(ctx, key)
	if errors.Is(err, redis.Nil) {
		return nil, r.errorf("GET", key, ErrNotFound)
	}
	if err != nil {
		return nil, r.errorf("GET", key, err)
	}
	return v, nil
}

// Put implements Store. The key has no expiry, even if it had one.
func (r *Redis) Put(ctx context.Context, key string, value []byte) error {
	if key == "" {
		return r.errorf("PUT", "", errEmptyKey)
	}
	if err := r.client.Set(ctx, key, value, 0).Err(); err != nil {
		return r.errorf("PUT", key, err)
	}
	return nil
}

// Delete implements Store.
func (r *Redis) Delete(ctx context.Context, key string) error {
	if key == "" {
		return r.errorf("DELETE", "", errEmptyKey)
	}
	if err := r.client.Del(ctx, key).Err(); err != nil {
		return r.errorf("DELETE", key, err)
	}
	return nil
}

// PutLeased implements Leaser; see Redis for how.
func (r *Redis) PutLeased(ctx context.Context, key string, value []byte, ttl time.Duration) (Lease, error) {
	if key == "" {
		return nil, r.errorf("PUT", "", errEmptyKey)
	}
	if err := checkTTL(ttl); err != nil {
		return nil, r.errorf("PUT", key, err)
	}
	return startLease(ctx, r.g, fmt.Sprintf("%s: lease on key %q", r.name, key), value, ttl, keeper{
		write: func(ctx context.Context, v []byte) error {
			if err := r.client.Set(ctx, key, v, ttl).Err(); err != nil {
				return r.errorf("PUT", key, err)
			}
			return nil
		},
		refresh: func(ctx context.Context) (bool, error) {
			ok, err := r.client.PExpire(ctx, key, ttl).Result()
			if err != nil {
				return false, r.errorf("PEXPIRE", key, err)
			}
			return !ok, nil
		},
		remove: func(ctx context.Context) error { return r.Delete(ctx, key) },
	})
}

// Watch implements Watcher; see Redis for how.
func (r *Redis) Watch(ctx context.Context, prefix string) (<-chan Event, error) {
	if r.opts.Watch != WatchPoll {
		err := r.enableNotifications(ctx)
		if err == nil {
			return r.watchNotify(ctx, prefix)
		}
		if r.opts.Watch == WatchNotify || !errors.Is(err, errConfigRefused) {
			return nil, err
		}
	}
	return pollWatch(ctx, r.g, prefix, r.opts.PollInterval, r.list, nil, nil)
}

var errConfigRefused = errors.New("the server refused CONFIG")

// notifyFlags are the notify-keyspace-events classes Watch needs: keyspace
// channel (K), generic commands like DEL (g), strings (SET, $), expired
// (x) and evicted (e) keys.
const notifyFlags = "Kg$xe"

func (r *Redis) enableNotifications(ctx context.Context) error {
	cur, err := r.client.ConfigGet(ctx, "notify-keyspace-events").Result()
	if err != nil {
		if isRedisRefusal(err) {
			return r.errorf("CONFIG GET notify-keyspace-events", "", fmt.Errorf("%w: %w", errConfigRefused, err))
		}
		return r.errorf("CONFIG GET notify-keyspace-events", "", err)
	}
	flags := cur["notify-keyspace-events"]
	want := flags
	for _, f := range notifyFlags {
		if strings.ContainsRune(want, f) {
			continue
		}
		// A stands for all the classes but key-miss and new-key events.
		if f != 'K' && strings.ContainsRune(want, 'A') {
			continue
		}
		want += string(f)
	}
	if want == flags {
		return nil
	}
	if err := r.client.ConfigSet(ctx, "notify-keyspace-events", want).Err(); err != nil {
		if isRedisRefusal(err) {
			return r.errorf("CONFIG SET notify-keyspace-events "+want, "", fmt.Errorf("%w: %w", errConfigRefused, err))
		}
		return r.errorf("CONFIG SET notify-keyspace-events "+want, "", err)
	}
	return nil
}

// isRedisRefusal tells an error answered by the server (NOPERM, unknown
// command, ...) from a broken connection.
func isRedisRefusal(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

func (r *Redis) watchNotify(ctx context.Context, prefix string) (<-chan Event, error) {
	chanPrefix := "__keyspace@" + strconv.Itoa(r.opts.DB) + "__:"
	pattern := chanPrefix + escapeGlob(prefix) + "*"
	ps := r.client.PSubscribe(ctx, pattern)
	// Wait for the server to confirm, so that no write after Watch returns
	// goes unseen.
	sctx, cancel := context.WithTimeout(ctx, r.opts.DialTimeout)
	msg, err := ps.Receive(sctx)
	cancel()
	if err == nil {
		if _, ok := msg.(*redis.Subscription); !ok {
			err = fmt.Errorf("unexpected answer %T to PSUBSCRIBE", msg)
		}
	}
	if err != nil {
		ps.Close()
		return nil, r.errorf("PSUBSCRIBE "+pattern, "", err)
	}
	ch := make(chan Event, watchBuffer)
	err = r.g.goCtx(ctx, func(ctx context.Context) {
		defer close(ch)
		// Receive does not watch ctx; closing the subscription ends it.
		stop := context.AfterFunc(ctx, func() { ps.Close() })
		defer stop()
		defer ps.Close()
		send := func(e Event) bool { return sendEvent(ctx, ch, e) }
		bo := backoff{min: 50 * time.Millisecond, max: 2 * time.Second}
		broken := false
		for {
			msg, err := ps.Receive(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				// The next Receive dials again and subscribes anew.
				broken = true
				if !sleep(ctx, bo.next()) {
					return
				}
				continue
			}
			switch m := msg.(type) {
			case *redis.Subscription:
				if !broken {
					continue
				}
				// Back after an outage: a restarted server has forgotten
				// notify-keyspace-events.
				if err := r.enableNotifications(ctx); err != nil {
					if !sleep(ctx, bo.next()) {
						return
					}
					continue // Resync once it works
				}
				broken = false
				bo.reset()
				if !send(Event{Kind: Resync}) {
					return
				}
			case *redis.Message:
				key := strings.TrimPrefix(m.Channel, chanPrefix)
				ev, ok := r.event(ctx, key, m.Payload)
				if ok && !send(ev) {
					return
				}
			}
		}
	})
	if err != nil {
		ps.Close()
		return nil, r.errorf("watch", prefix, err)
	}
	return ch, nil
}

// event turns a keyspace notification into an Event; ok is false for
// notifications that change no value (expire) or concern other types.
func (r *Redis) event(ctx context.Context, key, what string) (Event, bool) {
	switch what {
	case "expired":
		return Event{Kind: Delete, Key: key, Cause: CauseExpired}, true
	case "del", "evicted", "rename_from", "move_from":
		return Event{Kind: Delete, Key: key, Cause: CauseDeleted}, true
	case "expire", "persist":
		return Event{}, false
	}
	gctx, cancel := context.WithTimeout(ctx, r.opts.DialTimeout)
	defer cancel()
	v, err := r.getBounded(gctx, key)
	switch {
	case errors.Is(err, redis.Nil):
		return Event{Kind: Delete, Key: key}, true
	case isRedisRefusal(err), errors.Is(err, errTooLarge):
		return Event{}, false // not a string, or over the cap: not Ferry's
	case err != nil:
		// The value could not be read back: tell the receiver to re-read.
		return Event{Kind: Resync}, true
	}
	return Event{Kind: Put, Key: key, Value: v}, true
}

// list is the polling Watch's view: SCAN MATCH prefix* then a bounded
// read of each key (listBounded).
func (r *Redis) list(ctx context.Context, prefix string) (map[string][]byte, error) {
	out := make(map[string][]byte)
	var cursor uint64
	for {
		keys, next, err := r.client.Scan(ctx, cursor, escapeGlob(prefix)+"*", 1000).Result()
		if err != nil {
			return nil, r.errorf("SCAN", prefix, err)
		}
		if len(keys) > 0 {
			if err := r.listBounded(ctx, keys, out); err != nil {
				return nil, r.errorf("GETRANGE", prefix, err)
			}
		}
		cursor = next
		if cursor == 0 {
			return out, nil
		}
	}
}

// escapeGlob quotes the characters Redis patterns treat specially.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// Close stops the leases (their keys expire within their ttl) and watches
// started through r and closes the connections.
func (r *Redis) Close() error {
	r.g.close()
	if err := r.client.Close(); err != nil {
		return r.errorf("close", "", err)
	}
	return nil
}
