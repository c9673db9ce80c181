package kit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/ferrydev/ferry/sdk"
)

// Bounds of a cluster secret: the shortest one accepted, and the largest
// file read for one (a secret file is a line of random bytes, not a
// document).
const (
	MinSecretLen  = 16
	MaxSecretFile = 64 << 10
)

// ReadSecretFile reads the cluster secret file at path: at most
// MaxSecretFile bytes, one trailing newline ("\n" or "\r\n", as editors
// and `echo` leave) trimmed, at least MinSecretLen bytes left. unreadable
// is what the operator should do when the file cannot be opened or read
// ("make the file readable by the plugin, or set cluster_secret
// instead"); the caller prefixes where the setting was written.
func ReadSecretFile(path, unreadable string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w; %s", err, unreadable)
	}
	defer f.Close()
	b := make([]byte, MaxSecretFile+1)
	n, err := io.ReadFull(f, b)
	switch {
	case err == nil:
		return nil, fmt.Errorf("%s: larger than %d bytes; is this the secret file?", path, MaxSecretFile)
	case !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
		return nil, fmt.Errorf("%w; %s", err, unreadable)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b[:n], []byte("\n")), []byte("\r"))
	if len(b) < MinSecretLen {
		return nil, fmt.Errorf("%s: the secret is %d bytes, too short; write at least %d random bytes into it (for example `openssl rand -hex 32 > %s`), the same on every engine",
			path, len(b), MinSecretLen, path)
	}
	return b, nil
}

// EngineSecret is the engine's cluster secret from cfg (StartConfig's
// ClusterSecret), copied, or nil when it has none (or one shorter than
// MinSecretLen): the secret a plugin uses when its own block names none,
// so that a cluster sets its secret once.
func EngineSecret(cfg sdk.StartConfig) []byte {
	if len(cfg.ClusterSecret) < MinSecretLen {
		return nil
	}
	return append([]byte(nil), cfg.ClusterSecret...)
}
