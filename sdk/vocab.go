package sdk

import (
	"fmt"
	"strings"

	"github.com/ferrydev/ferry/internal/enum"
)

// The words that cross the plugin boundary: what kind of memory a region
// is, what a region allows peers to do, and how urgent a request is. Each
// is one type here; the host aliases them (host.Perm, host.Priority), the
// segment descriptor writes their text forms, and the config package
// validates an operator's file against them. A plugin never needs another
// spelling of these words.

// MemoryKind is where a region's bytes live. Its text form is what plugins
// declare in Info.MemoryKinds, what a region carries in Region.Kind, and
// what a segment descriptor writes as a buffer's location.
// The wire (the plugin protocol) and the JSON of descriptors carry the
// text forms.
type MemoryKind string

// Memory kinds.
const (
	// MemoryCPU is host memory: what Engine.Register takes today.
	MemoryCPU MemoryKind = "cpu"
	// MemoryCUDA is NVIDIA GPU memory, reached through a device plugin.
	MemoryCUDA MemoryKind = "cuda"
	// MemoryROCm is AMD GPU memory, reached through a device plugin.
	MemoryROCm MemoryKind = "rocm"
	// MemoryFile is a file segment's storage.
	MemoryFile MemoryKind = "file"
)

// MemoryKinds lists every memory kind, in the order the documentation
// names them.
var MemoryKinds = []MemoryKind{MemoryCPU, MemoryCUDA, MemoryROCm, MemoryFile}

// ParseMemoryKind returns the memory kind written as s. The empty string is
// MemoryCPU: a region or descriptor that names no kind is host memory, as
// every one was before kinds were declared.
func ParseMemoryKind(s string) (MemoryKind, error) {
	if s == "" {
		return MemoryCPU, nil
	}
	for _, k := range MemoryKinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown memory kind %q: want one of %s", s, quoted(MemoryKinds))
}

func (k MemoryKind) String() string { return string(k) }

// OrCPU returns k, or MemoryCPU for the empty kind: what a region or
// buffer that names no kind holds.
func (k MemoryKind) OrCPU() MemoryKind {
	if k == "" {
		return MemoryCPU
	}
	return k
}

// Perm is what a region allows. Its text forms ("local", "remote-read",
// "remote-read-write") are what segment descriptors carry; Perm marshals
// to and from them, so a descriptor's JSON holds the same strings whether
// it was written with a string field or a Perm.
type Perm uint8

const (
	// PermLocal: only the owning engine may use the region; peers may not.
	PermLocal Perm = 1
	// PermRemoteRead: peers may read the region.
	PermRemoteRead Perm = 2
	// PermRemoteReadWrite: peers may read and write the region.
	PermRemoteReadWrite Perm = 3
)

// Perms lists every permission, from the least to the most allowed.
var Perms = []Perm{PermLocal, PermRemoteRead, PermRemoteReadWrite}

var permNames = [...]string{PermLocal: "local", PermRemoteRead: "remote-read", PermRemoteReadWrite: "remote-read-write"}

func (p Perm) String() string { return enum.String(p, permNames[:], "perm") }

// ParsePerm returns the permission whose text form is s.
func ParsePerm(s string) (Perm, error) {
	for _, p := range Perms {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown permission %q: want one of %s", s, quoted(Perms))
}

// Valid reports whether p is one of the declared permissions.
func (p Perm) Valid() bool { return p >= PermLocal && p <= PermRemoteReadWrite }

// MarshalText writes p's text form; an undeclared value is an error rather
// than a string no reader accepts.
func (p Perm) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("permission %d is not one of %s", uint8(p), quoted(Perms))
	}
	return []byte(p.String()), nil
}

// UnmarshalText reads p's text form, as ParsePerm.
func (p *Perm) UnmarshalText(b []byte) error {
	v, err := ParsePerm(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// AllowsRemoteRead reports whether peers may read the region.
func (p Perm) AllowsRemoteRead() bool { return p == PermRemoteRead || p == PermRemoteReadWrite }

// AllowsRemoteWrite reports whether peers may write the region.
func (p Perm) AllowsRemoteWrite() bool { return p == PermRemoteReadWrite }

// Priority orders requests under load. The ring descriptor carries it as
// its numeric value (ring.Descriptor.Prio), so the numbers are part of the
// protocol: PriorityNormal is the zero value.
type Priority uint8

const (
	PriorityNormal Priority = 0
	PriorityHigh   Priority = 1
	PriorityLow    Priority = 2
)

// Priorities lists every priority by value: Priorities[p] is p.
var Priorities = []Priority{PriorityNormal, PriorityHigh, PriorityLow}

var priorityNames = [...]string{PriorityNormal: "normal", PriorityHigh: "high", PriorityLow: "low"}

func (p Priority) String() string { return enum.String(p, priorityNames[:], "priority") }

// ParsePriority returns the priority written as s: "normal", "high" or
// "low", as policies name them.
func ParsePriority(s string) (Priority, error) {
	for _, p := range Priorities {
		if p.String() == s {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown priority %q: want one of %s", s, quoted(Priorities))
}

// Valid reports whether p is one of the declared priorities.
func (p Priority) Valid() bool { return p <= PriorityLow }

// quoted lists words as `"a", "b", "c"`.
func quoted[T fmt.Stringer](l []T) string {
	q := make([]string, len(l))
	for i, x := range l {
		q[i] = `"` + x.String() + `"`
	}
	return strings.Join(q, ", ")
}
