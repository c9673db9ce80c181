// Command ferry runs, inspects and measures Ferry engines.
//
//	ferry run      run an engine from a config file and expose memory
//	ferry metad    serve the embedded HTTP metastore
//	ferry plugins  list plugins: version, checksum, protocol, probe result
//	ferry bench    measure a transport against a raw baseline, two processes;
//	               with --qos, a scenario of mixed streams (benchqos*.go,
//	               its arithmetic in internal/qosstat)
//	ferry explain  say which transport a request would take, and why
//	ferry demo     the main job: two engines move verified data
package main
