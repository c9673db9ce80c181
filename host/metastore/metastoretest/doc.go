// Package metastoretest starts real metastore servers (redis-server, etcd)
// for tests, on free loopback ports in temporary directories, and stops
// them when the test ends. A missing binary skips the test, except under
// CI=true, where it fails it: CI installs the packages and must run them.
// StartMooncake starts a stand-in for Mooncake's HTTP metadata server (in
// this process, from its sources' status codes and bodies), against which
// Ferry's HTTP client is tested.
package metastoretest
