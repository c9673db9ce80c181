// Package enum gives Ferry's small enumerations (permissions, priorities,
// ops, states, verdicts, stages) their text forms from one table per type,
// so that each type's String is a line and every one says the same thing
// for a value it does not know.
//
// It owns only that lookup: it must not hold any type's names, parse text
// back into values, or import anything of Ferry's, since sdk/ and sdk/ring
// use it and a vendor's plugin links it.
package enum
