// Package pluginclient is the host side of the Ferry plugin protocol: it
// starts a plugin binary through go-plugin (Launch), negotiates the
// protocol version, hands the plugin its fd socket, and converts the
// control plane's gRPC messages to and from the sdk's plain Go types
// (Client). What a plugin chooses the size of in its answers (Probe's
// reason and rails, Start's endpoint, Stats' counters, an error's text)
// is capped here (limits.go), so that a faulty plugin's answer is refused
// before the host keeps it. RegisterMemoryBatch sends many regions in one
// call to a plugin whose SDK takes batches, and one by one to any other.
// It lives in the module's internal/ tree because two parts of
// Ferry need it and no plugin author does: host/loader, and sdk/plugintest,
// which drives a plugin the way a host does and cannot import host/.
//
// It must not know what a host does with a plugin (routing, slicing,
// restarts are host/'s), and sdk/ outside plugintest must not import it:
// a plugin built from sdk/ carries no host code.
package pluginclient
