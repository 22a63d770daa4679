//go:build !amd64 || purego

package bth

import "hash/crc32"

// crcUpdate continues the CRC-32 (IEEE) crc over p, as crc32.Update does.
func crcUpdate(crc uint32, p []byte) uint32 { return crc32.Update(crc, crc32.IEEETable, p) }

// haveCRCFold reports whether crcUpdate folds 512 bits a step: not here.
const haveCRCFold = false
