package admission

import (
	"github.com/ferrydev/ferry/internal/enum"
	"github.com/ferrydev/ferry/sdk"
)

// Class is a priority class with TENT's meaning and numbering: High is
// 0, Medium 1, Low 2, a lower number more urgent (TENT's PRIO_HIGH,
// PRIO_MEDIUM, PRIO_LOW, which the C ABI uses). Ferry's own numbering,
// sdk.Priority, differs because its zero value must be the ordinary
// request: ClassOf and Class.Priority convert.
//
//	sdk.Priority     value  Class        value (TENT)
//	PriorityHigh     1      ClassHigh    0  PRIO_HIGH
//	PriorityNormal   0      ClassMedium  1  PRIO_MEDIUM
//	PriorityLow      2      ClassLow     2  PRIO_LOW
type Class uint8

const (
	// ClassHigh is latency-critical work (a decode worker's fetch): it
	// goes first and never waits behind Medium or Low.
	ClassHigh Class = iota
	// ClassMedium is ordinary work, a request's default.
	ClassMedium
	// ClassLow is bulk work (checkpoints, offload): it takes what the
	// others leave.
	ClassLow
	// Classes is how many classes there are.
	Classes = 3
)

var classNames = [...]string{ClassHigh: "high", ClassMedium: "medium", ClassLow: "low"}

func (c Class) String() string { return enum.String(c, classNames[:], "class") }

// ParseClass returns the class named s: "high", "medium" or "low".
func ParseClass(s string) (Class, bool) {
	for c, n := range classNames {
		if n == s {
			return Class(c), true
		}
	}
	return 0, false
}

// ClassOf maps Ferry's priority to its class; a priority out of range
// is Medium.
func ClassOf(p sdk.Priority) Class {
	switch p {
	case sdk.PriorityHigh:
		return ClassHigh
	case sdk.PriorityLow:
		return ClassLow
	}
	return ClassMedium
}

// Priority maps the class back to Ferry's priority.
func (c Class) Priority() sdk.Priority {
	switch c {
	case ClassHigh:
		return sdk.PriorityHigh
	case ClassLow:
		return sdk.PriorityLow
	}
	return sdk.PriorityNormal
}
