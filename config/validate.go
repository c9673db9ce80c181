package config

import (
	"errors"
	"fmt"
	"math/bits"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ferrydev/ferry/sdk/conf"
	"github.com/ferrydev/ferry/sdk/kit"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

var pluginName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Validate checks c and returns every problem found, joined, or nil. For a
// Config from Parse the errors point at the offending setting's
// file:line:column; for one built in code they name the field. Validate
// does not touch the file system or the network: whether plugin binaries
// exist is the loader's business.
func (c *Config) Validate() error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, conf.ErrorAt(c.where(field), field, format, args...))
	}

	topTable.Check(c, "", c.has, fail)
	if c.Name != "" && !cleanName(c.Name) {
		fail("name", "%q must be at most 255 bytes of printable UTF-8 without spaces", c.Name)
	}
	if c.MachineID != "" && !cleanName(c.MachineID) {
		fail("machine_id", "%q must be at most 255 bytes of printable UTF-8 without spaces; leave it out to derive it from /etc/machine-id", c.MachineID)
	}

	switch {
	case c.ClusterSecret != nil && c.ClusterSecretFile != "":
		fail("cluster_secret_file", "is set, and so is Config.ClusterSecret: keep one (Default sets ClusterSecretFile from $%s)", SecretFileEnv)
	case c.ClusterSecret != nil && len(c.ClusterSecret) < kit.MinSecretLen:
		fail("cluster_secret_file", "Config.ClusterSecret is %d bytes; a cluster secret is at least %d, the same on every engine", len(c.ClusterSecret), kit.MinSecretLen)
	}

	errs = append(errs, c.validateMetastore()...)

	// An unset listen (a Config built in code) means the default; one
	// written empty in a file is a mistake worth naming.
	switch cl := c.Control.Listen; {
	case cl == "" && c.has("control.listen"):
		fail("control.listen", `is empty; set a host:port such as "127.0.0.1:7071" (port 0 picks a free one), or remove it to let the engine choose (its tcp listen address, else %q)`, DefaultControlListen)
	case cl != "":
		if err := checkHostPort(cl); err != nil {
			fail("control.listen", "%q: %v; write it like \"127.0.0.1:7071\"", cl, err)
		}
	}

	if ml := c.Metrics.Listen; ml != "" || c.has("metrics") {
		if err := checkHostPort(ml); err != nil {
			fail("metrics.listen", "%q: %v; write it like \"127.0.0.1:9464\" (port 0 picks a free one)", ml, err)
		}
	}
	metricsTable.Check(&c.Metrics, "metrics.", c.has, fail)
	errs = append(errs, c.validateCredit(&c.QoS.Credit, "qos.credit.")...)

	first := map[string]string{}
	for i := range c.Plugins {
		errs = append(errs, validatePlugin(&c.Plugins[i], pluginTable, "ferry-plugin-", first)...)
	}
	firstDevice := map[string]string{}
	for i := range c.Devices {
		errs = append(errs, validatePlugin(&c.Devices[i], deviceTable, "ferry-device-", firstDevice)...)
	}
	firstPolicy := map[string]string{}
	for i := range c.Policies {
		errs = append(errs, c.validatePolicy(i, firstPolicy)...)
	}
	firstRail := map[string]string{}
	for i := range c.Rails {
		errs = append(errs, c.validateRail(i, firstRail)...)
	}

	t := &c.Transfer
	transferTable.Check(t, "transfer.", c.has, fail)
	if t.RingDepth >= MinRingDepth && t.RingDepth <= MaxRingDepth && t.RingDepth&(t.RingDepth-1) != 0 {
		lo := 1 << (bits.Len(uint(t.RingDepth)) - 1)
		fail("transfer.ring_depth", "%d is not a power of two; use %d or %d", t.RingDepth, lo, 2*lo)
	}
	// A duration left out (zero, not written in the file) means its
	// default; stall_after = "0s" in a file sets Off instead.
	superviseTable.Check(&c.Supervise, "supervise.", c.has, fail)
	errs = append(errs, c.validateQoS()...)
	return errors.Join(errs...)
}

// kindList lists the metastore kinds for messages, each with what it does.
var kindList = func() string {
	var l []string
	for _, k := range metastoreKinds {
		l = append(l, fmt.Sprintf("%q (%s)", k.Word, k.Doc))
	}
	return strings.Join(l[:len(l)-1], ", ") + " or " + l[len(l)-1]
}()

func (c *Config) validateMetastore() []error {
	var errs []error
	fail := func(field, format string, args ...any) {
		errs = append(errs, conf.ErrorAt(c.where(field), field, format, args...))
	}
	m := c.Metastore
	metastoreTable.Check(&m, "metastore.", c.has, fail)
	switch m.Kind {
	case MetastoreEmbedded:
		if m.Listen == "" {
			fail("metastore.listen", `is empty; set a host:port such as "127.0.0.1:7070" (port 0 picks a free one)`)
		} else if err := checkHostPort(m.Listen); err != nil {
			fail("metastore.listen", "%q: %v; write it like \"127.0.0.1:7070\"", m.Listen, err)
		}
		if m.URL != "" {
			fail("metastore.url", `is only used with kind = "http"; remove it, or set kind = "http" to use a remote metastore`)
		}
	case MetastoreHTTP:
		if m.URL == "" {
			fail("metastore.url", `is required with kind = "http": set url = "http://<host>:<port>/metadata", the metastore of the engine that embeds it (or of ferry metad)`)
		} else if err := checkURL(m.URL); err != nil {
			fail("metastore.url", "%q: %v", m.URL, err)
		}
		if m.Listen != "" {
			fail("metastore.listen", `is only used with kind = "embedded"; remove it`)
		}
	case MetastoreNone:
		if m.Listen != "" || m.URL != "" {
			fail("metastore.kind", `is "none", which needs neither listen nor url; remove them or pick "embedded" or "http"`)
		}
	case MetastoreRedis:
		if m.Address == "" {
			fail("metastore.address", `is required with kind = "redis": set address = "<host>:<port>", like "10.0.0.1:6379"`)
		} else if err := checkHostPort(m.Address); err != nil {
			fail("metastore.address", "%q: %v; write it like \"10.0.0.1:6379\"", m.Address, err)
		}
	case MetastoreEtcd:
		if len(m.Endpoints) == 0 {
			fail("metastore.endpoints", `is required with kind = "etcd": set endpoints = ["http://<host>:2379", ...], the cluster's client URLs`)
		}
		for _, ep := range m.Endpoints {
			https, err := checkEndpoint(ep)
			if err != nil {
				fail("metastore.endpoints", "%q: %v", ep, err)
			} else if https && !m.TLS {
				fail("metastore.endpoints", "%q is https: set tls = true", ep)
			}
		}
	case "":
		fail("metastore.kind", "is empty; set %s", kindList)
	default:
		fail("metastore.kind", "%q is not supported; use %s", m.Kind, kindList)
	}
	// Settings that only some kinds use. Listen and url have their own
	// messages above for the kinds that use one of them.
	for _, f := range metastoreTable.Fields {
		if f.Only == nil || slices.Contains(f.Only, m.Kind) {
			continue
		}
		if (f.Name == "listen" || f.Name == "url") && m.Kind != MetastoreRedis && m.Kind != MetastoreEtcd {
			continue
		}
		if field := "metastore." + f.Name; !conf.IsZero(f.At(&m)) || c.has(field) {
			fail(field, `is only used with kind = "%s"; remove it`, strings.Join(f.Only, `" or kind = "`))
		}
	}
	if m.Username != "" && m.Password == "" {
		fail("metastore.username", "is set without a password; set password too")
	}
	if m.CAFile != "" && !m.TLS {
		fail("metastore.ca_file", "is set but tls is off; set tls = true")
	}
	if m.Prefix != "" || c.has("metastore.prefix") {
		if m.Prefix == "" || !cleanName(m.Prefix) {
			fail("metastore.prefix", "%q must be 1 to 255 bytes of printable UTF-8 without spaces, like %q", m.Prefix, DefaultMetastorePrefix)
		}
	}
	return errs
}

// checkEndpoint checks an etcd endpoint: a http(s) URL or a bare host:port.
func checkEndpoint(s string) (https bool, err error) {
	if !strings.Contains(s, "://") {
		if err := checkHostPort(s); err != nil {
			return false, fmt.Errorf(`%w; write it like "http://10.0.0.1:2379"`, err)
		}
		return false, nil
	}
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return false, errors.New(`not a URL; write it like "http://10.0.0.1:2379"`)
	case u.Scheme != "http" && u.Scheme != "https":
		return false, errors.New(`the scheme must be http or https, like "http://10.0.0.1:2379"`)
	case u.Host == "":
		return false, errors.New(`no host; write it like "http://10.0.0.1:2379"`)
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return false, errors.New(`remove the path, query or fragment; etcd endpoints are like "http://10.0.0.1:2379"`)
	}
	if err := checkHostPort(u.Host); err != nil {
		return false, fmt.Errorf(`%w; give the port, like "http://10.0.0.1:2379"`, err)
	}
	return u.Scheme == "https", nil
}

// validatePlugin checks a plugin or device block (t is its table, prefix
// its binaries' name).
func validatePlugin(p *Plugin, t *conf.Table[Plugin], prefix string, first map[string]string) []error {
	var errs []error
	l := labelled{kind: t.Name, name: p.Name, decl: p.DeclRange, loc: p.loc}
	fail := l.failer(&errs)
	l.checkIdentity(fail, first, " (the binary is "+prefix+"<name>)", "remove one or merge them")
	t.Check(p, "", l.has, fail)
	if p.SHA256 != "" && !isHex64(p.SHA256) {
		fail("sha256", "want 64 hex digits, the output of `sha256sum %s%s`; got %d characters", prefix, p.Name, len(p.SHA256))
	}
	if p.Body != nil {
		start := hcl.Pos{Line: max(p.BodyLine, 1), Column: max(p.BodyColumn, 1), Byte: p.BodyByte}
		if _, diags := hclsyntax.ParseConfig(p.Body, p.BodyFile, start); diags.HasErrors() {
			errs = append(errs, conf.DiagErrors(diags, "")...)
		}
	}
	return errs
}

// where returns the location of field, falling back to its block and then
// to the start of the file.
func (c *Config) where(field string) hcl.Range {
	if r, ok := c.loc[field]; ok {
		return r
	}
	if i := strings.LastIndexByte(field, '.'); i > 0 {
		if r, ok := c.loc[field[:i]]; ok {
			return r
		}
	}
	if r, ok := c.loc[""]; ok {
		return r
	}
	return hcl.Range{Filename: c.File}
}

func cleanName(s string) bool {
	if len(s) > 255 || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return false
		}
	}
	return true
}

func checkHostPort(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("not a host:port")
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q is not a number in 0..65535", port)
	}
	return nil
}

func checkURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return errors.New(`not a URL; write it like "http://10.0.0.1:7070/metadata"`)
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New(`the scheme must be http or https, like "http://10.0.0.1:7070/metadata"`)
	case u.Host == "":
		return errors.New(`no host; write it like "http://10.0.0.1:7070/metadata"`)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return errors.New(`remove the query or fragment; the client adds ?key=<key> itself`)
	}
	return nil
}
