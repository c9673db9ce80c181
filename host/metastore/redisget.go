package metastore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// errTooLarge marks a value over MaxValueSize: a Redis string may hold
// 512 MiB, and GET reads all of it into memory before anything can look
// at its size.
var errTooLarge = errors.New("value is over the cap")

// getBounded reads key's value through GETRANGE key 0 MaxValueSize, which
// sends at most MaxValueSize+1 bytes however large the value is: more
// than MaxValueSize is refused (errTooLarge), before a descriptor
// decoder sees it. GETRANGE answers "" for an absent key as for an empty
// value, so an empty answer is asked again with GET (redis.Nil: absent).
// A server whose ACL refuses GETRANGE (an ACL from before it was needed)
// is read with GET, unbounded, as before.
func (r *Redis) getBounded(ctx context.Context, key string) ([]byte, error) {
	v, err := r.client.GetRange(ctx, key, 0, MaxValueSize).Bytes()
	switch {
	case isNoPerm(err):
		return r.client.Get(ctx, key).Bytes()
	case err != nil:
		return nil, err
	case len(v) > MaxValueSize:
		return nil, fmt.Errorf("%w: more than %d bytes (a Ferry descriptor is a few KiB): someone else writes to the metastore", errTooLarge, MaxValueSize)
	case len(v) == 0:
		return r.client.Get(ctx, key).Bytes()
	}
	return v, nil
}

// listBounded reads keys' values as getBounded does, in one pipeline: a
// key absent, over the cap or not a string is left out (the polling
// watch then sees it as gone); an ACL that refuses GETRANGE falls back
// to MGET.
func (r *Redis) listBounded(ctx context.Context, keys []string, out map[string][]byte) error {
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := r.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.GetRange(ctx, k, 0, MaxValueSize)
		}
		return nil
	})
	if len(cmds) > 0 && isNoPerm(cmds[0].Err()) {
		return r.mget(ctx, keys, out)
	}
	if err != nil && !isRedisRefusal(err) {
		return err
	}
	for i, c := range cmds {
		v, err := c.Bytes()
		switch {
		case err != nil || len(v) > MaxValueSize:
			continue
		case len(v) == 0:
			v, err = r.client.Get(ctx, keys[i]).Bytes()
			if err != nil {
				continue
			}
		}
		out[keys[i]] = v
	}
	return nil
}

func (r *Redis) mget(ctx context.Context, keys []string, out map[string][]byte) error {
	vals, err := r.client.MGet(ctx, keys...).Result()
	if err != nil {
		return err
	}
	for i, v := range vals {
		if s, ok := v.(string); ok { // nil: gone since the SCAN
			out[keys[i]] = []byte(s)
		}
	}
	return nil
}

func isNoPerm(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOPERM")
}
