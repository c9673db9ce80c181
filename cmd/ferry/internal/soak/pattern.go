package soak

import "encoding/binary"

// Block is the granularity of the range model: every write starts and
// ends on a multiple of it.
const Block = 4096

// idBits is how many bits of a pattern word name the write; the rest
// name the word's offset (in 8-byte words) in the remote buffer.
const (
	idBits  = 28
	offBits = 64 - idBits
	offMask = 1<<offBits - 1
	// MaxID is the largest write id a pattern can carry.
	MaxID = 1<<idBits - 1
)

// keystream is the word the pattern of every write XORs at byte offset
// off, so that zeroes, a constant or a shifted copy decode as "other".
func keystream(key, off uint64) uint64 {
	x := key ^ off*0x9e3779b97f4a7c15
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// word is the 8 bytes that write id puts at remote byte offset off.
func word(key uint64, id uint32, off uint64) uint64 {
	return keystream(key, off) ^ (uint64(id)<<offBits | (off>>3)&offMask)
}

// Fill writes write id's pattern into b, which lands at remote byte
// offset off (a multiple of 8; len(b) a multiple of 8).
func Fill(b []byte, key uint64, id uint32, off uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], word(key, id, off+uint64(i)))
	}
}

// Decode says which write put w at remote byte offset off: ok is false
// when w is no write's word for that offset. Eight zero bytes are write
// 0, what a freshly registered buffer holds.
func Decode(key, off, w uint64) (id uint32, ok bool) {
	if w == 0 {
		return 0, true
	}
	x := w ^ keystream(key, off)
	if x&offMask != (off>>3)&offMask {
		return 0, false
	}
	return uint32(x >> offBits), true
}

// Poison fills b with bytes that decode as no write, so that a read that
// reports COMPLETED without writing its buffer shows as "other".
func Poison(b []byte) {
	for i := range b {
		b[i] = 0xa5
	}
}
