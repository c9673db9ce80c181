package host

// PublishWrites returns how many times e has written its descriptor to
// the metastore; RegisteredBuffers, how many buffers it has registered.
// Tests count publications and check rollbacks with them.
func PublishWrites(e *Engine) uint64 { return e.pub.Writes() }

// RegisteredBuffers: see PublishWrites.
func RegisteredBuffers(e *Engine) int { return len(e.mem.Buffers()) }
