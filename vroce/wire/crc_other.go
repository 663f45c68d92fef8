//go:build !amd64 || purego

package wire

const haveFold256 = false

func fold256(crc uint32, p []byte, keys *[4]uint64, v *[16]byte) { panic("unreachable") }

func fold256Copy(crc uint32, dst, p []byte, keys *[4]uint64, v *[16]byte) { panic("unreachable") }

const haveFold128 = false

func fold128Copy(crc uint32, dst, p []byte, keys *[4]uint64, v *[16]byte) { panic("unreachable") }

const haveShortCRC = false

const haveStdlib512, stdlib512Min = false, 0

func shortCRC(p []byte, d uint64, z int, k *shortKeys) uint32 { panic("unreachable") }

func laneCRC(lane *[16]byte, k *shortKeys) uint32 { panic("unreachable") }
