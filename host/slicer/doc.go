// Package slicer decides how a request is cut: the slice size, how many
// slices, and which rails its slices may take. It answers "where is the
// slice size decided".
//
// The size starts from the configured transfer.slice_size and follows
// what the transport declares of itself (Caps: the slice it prefers, the
// largest it takes); the rails start from what the request's policy
// allows, less the rails a failed attempt is kept off.
//
// The package is pure: a plan is a function of plain numbers. It must not
// read clocks, touch rings or plugins, or allocate; the engine hands it
// the facts and acts on the plan.
package slicer
