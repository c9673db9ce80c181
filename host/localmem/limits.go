package localmem

import (
	"fmt"

	"github.com/ferrydev/ferry/host/segment"
)

// checkCount refuses registrations that would take the table past
// segment.MaxBuffers: a descriptor listing more is refused by every peer,
// so the engine would publish a segment nobody can open. have is how many
// are registered, adding how many more the call registers (a batch's
// length).
func checkCount(have, adding int) error {
	if have+adding > segment.MaxBuffers {
		return fmt.Errorf("%w: %d buffers are registered, and %d more would pass the cap of %d a segment may list (peers refuse a descriptor with more); register larger buffers, or unregister some first", ErrInvalid, have, adding, segment.MaxBuffers)
	}
	return nil
}
