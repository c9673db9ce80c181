package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// MetastoreURLForms says which URLs ParseMetastoreURL takes, for flags'
// help and messages.
const MetastoreURLForms = "http://host:port/metadata (Ferry's or Mooncake's HTTP metastore), " +
	"redis://[user:password@]host:port[/db] (rediss:// with TLS) or etcd://[user:password@]host:port[,host:port...] (etcds:// with TLS)"

// ParseMetastoreURL reads a metastore given as one URL (a command's
// --metastore): its kind from the scheme and the kind's settings from
// the rest. The result carries no TTL or prefix; SetMetastore keeps the
// file's.
func ParseMetastoreURL(s string) (Metastore, error) {
	bad := func(why string) (Metastore, error) {
		return Metastore{}, fmt.Errorf("metastore URL %q: %s; want %s", s, why, MetastoreURLForms)
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || rest == "" {
		return bad("no scheme")
	}
	switch scheme = strings.ToLower(scheme); scheme {
	case "http", "https":
		if err := checkURL(s); err != nil {
			return bad(err.Error())
		}
		return Metastore{Kind: MetastoreHTTP, URL: s}, nil
	case "redis", "rediss", "etcd", "etcds":
	default:
		return bad("unknown scheme " + strconv.Quote(scheme))
	}
	// url.Parse refuses etcd's comma-separated hosts; the user part is
	// cut off first and the hosts read one by one.
	var m Metastore
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		u, err := url.Parse("x://" + rest[:at+1] + "h")
		if err != nil || u.User == nil {
			return bad("cannot read its user:password part")
		}
		m.Username = u.User.Username()
		m.Password, _ = u.User.Password()
		if m.Password == "" {
			return bad("a user without a password")
		}
		rest = rest[at+1:]
	}
	hosts, path, _ := strings.Cut(rest, "/")
	m.TLS = scheme == "rediss" || scheme == "etcds"
	if strings.HasPrefix(scheme, "redis") {
		m.Kind, m.Address = MetastoreRedis, hosts
		if err := checkHostPort(hosts); err != nil {
			return bad(err.Error())
		}
		if path != "" {
			db, err := strconv.Atoi(path)
			if err != nil || db < 0 {
				return bad("the database " + strconv.Quote(path) + " is not a number")
			}
			m.Database = db
		}
		return m, nil
	}
	if path != "" {
		return bad("etcd takes no path")
	}
	m.Kind = MetastoreEtcd
	proto := "http://"
	if m.TLS {
		proto = "https://"
	}
	for _, h := range strings.Split(hosts, ",") {
		if err := checkHostPort(h); err != nil {
			return bad(err.Error())
		}
		m.Endpoints = append(m.Endpoints, proto+h)
	}
	return m, nil
}

// SetMetastore replaces the metastore block with m, keeping the block's
// ttl and prefix where m has none: a command's --metastore overrides the
// file's. The settings the file wrote in the block are forgotten, so that
// Validate does not blame the file's lines for what the override left
// out.
func (c *Config) SetMetastore(m Metastore) {
	if m.TTL == 0 {
		m.TTL = c.Metastore.TTL
	}
	if m.Prefix == "" {
		m.Prefix = c.Metastore.Prefix
	}
	c.Metastore = m
	for k := range c.loc {
		if k == "metastore" || strings.HasPrefix(k, "metastore.") {
			delete(c.loc, k)
		}
	}
}
