package config

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
)

// SecretFileEnv names the environment variable Default reads the cluster
// secret's file from: set it to the same file for every engine of a
// cluster that is configured in code.
const SecretFileEnv = "FERRY_CLUSTER_SECRET_FILE"

var generated = sync.OnceValue(func() []byte {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return []byte(hex.EncodeToString(b[:]))
})

// GeneratedSecret returns this process's cluster secret: 64 hex digits
// from crypto/rand, drawn at the first call and the same at every call
// after. Default uses it when $FERRY_CLUSTER_SECRET_FILE is unset. A
// program that starts engines in other processes hands it to them in a
// file (mode 0600) that their FERRY_CLUSTER_SECRET_FILE names.
func GeneratedSecret() []byte {
	return append([]byte(nil), generated()...)
}
