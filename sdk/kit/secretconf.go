package kit

import (
	"fmt"

	"github.com/ferrydev/ferry/sdk/conf"
)

// SecretSettings are a plugin's cluster_secret and cluster_secret_file,
// declared in its table by SecretFields and checked by SecretRule.
type SecretSettings struct {
	text, file string
	// Secret is the cluster secret: the block's own, else what the
	// plugin preset (EngineSecret); nil: none.
	Secret []byte
}

// SecretFields are the rows of cluster_secret and cluster_secret_file for
// a table over T, whose SecretSettings of returns. A relative file is
// taken from the directory of the operator's config file.
func SecretFields[T any](of func(*T) *SecretSettings) []conf.Field[T] {
	return []conf.Field[T]{
		{Name: "cluster_secret", Type: conf.String, DefaultDoc: "the engine's", Example: `"<at least 16 random bytes>"`,
			Doc: "The cluster secret, at least 16 bytes, the same on every engine: every connection is mutually authenticated with it. Without it or cluster_secret_file, the engine's own cluster_secret_file's secret.",
			At:  func(t *T) any { return &of(t).text },
			Check: func(t *T) error {
				s := of(t)
				if n := len(s.text); n < MinSecretLen {
					return fmt.Errorf("%d bytes is too short; use at least %d random bytes (for example the output of `openssl rand -hex 32`), the same on every engine", n, MinSecretLen)
				}
				s.Secret = []byte(s.text)
				return nil
			}},
		{Name: "cluster_secret_file", Type: conf.Path, DefaultDoc: "the engine's", Example: `"/etc/ferry/secret"`,
			Doc: "A file holding the cluster secret (a trailing newline trimmed), read at Start; keeps the secret out of the config file. Not with cluster_secret.",
			At:  func(t *T) any { return &of(t).file },
			Check: func(t *T) error {
				s := of(t)
				if s.file == "" {
					return fmt.Errorf("empty path; name the file that holds the cluster secret")
				}
				secret, err := ReadSecretFile(s.file, "make the file readable by the plugin, or set cluster_secret instead")
				if err != nil {
					return err
				}
				s.Secret = secret
				return nil
			}},
	}
}

// SecretRule refuses a block that sets both cluster_secret and
// cluster_secret_file.
func SecretRule(b conf.Block) {
	if b.Has("cluster_secret") && b.Has("cluster_secret_file") {
		b.Fail("cluster_secret", "cluster_secret and cluster_secret_file are both set; keep one (cluster_secret_file keeps the secret out of this file)")
	}
}
