package kit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadSecretFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	secret := []byte("0123456789abcdef0123")
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"plain", secret},
		{"newline", append(append([]byte{}, secret...), '\n')},
		{"crlf", append(append([]byte{}, secret...), '\r', '\n')},
	} {
		got, err := ReadSecretFile(write(tc.name, tc.data), "fix it")
		if err != nil || !bytes.Equal(got, secret) {
			t.Errorf("%s: got %q, %v; want %q", tc.name, got, err, secret)
		}
	}

	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "missing"), "no such file or directory; fix it"},
		{"directory", dir, "is a directory; fix it"},
		{"short", write("short", []byte("0123456789abcde\n")), "short: the secret is 15 bytes, too short; write at least 16"},
		{"large", write("large", bytes.Repeat([]byte("x"), MaxSecretFile+1)), "large: larger than 65536 bytes"},
	} {
		_, err := ReadSecretFile(tc.path, "fix it")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
}
